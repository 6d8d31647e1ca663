"""The SAG2 lexical-judge path: BM25 recall, a judge, term-expansion rounds, diversity re-rank.

The loop (defaults from the SAG-Wiki and SAG2 descriptions):

1. recall: BM25 top ``sag2.recall`` (50; ``deep_recall`` 100 for deep search) over quoted-OR
   query terms; in a search that also runs the dense path, its top ``dense_candidates`` join
   the pool (the judge ranks the union); the path alone is lexical-judge only;
2. judge: every candidate gets a yes-probability (shared state: the question and the evidence
   accepted so far); ties are broken by BM25 rank;
3. expansion (``rounds`` times, 1 by default, 0..2): the top ``seeds`` (10) not-yet-expanded
   candidates are split into sentences; terms are the tokenizer's words plus runs of two or more
   capitalised words; a term scores tf x idf x co-occurrence with a question term in the same
   sentence x seed probability, summed over seeds; terms made only of question terms and terms
   absent from the index are dropped; the best ``expansion_terms`` (20) are kept; one query
   "terms OR original" plus one query per term that must contain it; the lists are merged
   round-robin by rank, deduplicated, up to the round's candidate count; the grown pool is judged
   again with last round's scores as provisional. A candidate that only the dense path brought
   into the pool (no BM25 rank for the question's own terms) and that a next-hop query finds
   counts as that round's find, as it would have in the path alone: its next-hop rank and round
   are the judge's evidence that it is the next hop, and fusion gives it the next-hop slot (not
   in a tenant-scoped search: its score would weigh words over every tenant's documents). A
   round that brings no new term or candidate ends the loop;
4. a diversity re-rank of the top ``diversity_top`` so they do not all come from one section;
5. evidence-set selection (:mod:`hybridsag.paths.evidence`): the first ``set_k`` are taken
   greedily so that every entity the question names and every bridge the selected evidence
   opens is covered before a second passage on the same need (``set_k = 0``: the judge's order);
6. a targeted second hop, only when step 5 left a named gap: the names the selected evidence
   uses on the question's relation words that no candidate is about (at most ``gap_lookups``)
   are looked up by title (else as a phrase in the text), joined to the pool, the pool is
   judged again and step 5 runs again.

A hit's ``raw_score`` and ``judge_p`` are the judge's probability; its ``score`` is the highest
probability at or below its rank (so scores never rise down the list the selection ordered) and
``detail["evidence"]`` names the need a selected passage was taken for (``entity``, ``bridge``
or ``judge``).

If the judge fails for good, the path returns BM25 order with ``degraded`` and the reason, or
raises when ``judge.on_failure = "raise"``; a judge stopped by the search's remote budget
(:class:`~hybridsag.errors.BudgetError`) always degrades: BM25 order in the first round, the
last round's judgement in a later one. A judge that answered but went on without part of
its evidence (the offline judge without the query embedding) reports why in ``degraded`` too.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hybridsag.errors import BudgetError, ConfigError, HybridSagError, JudgeError
from hybridsag.fusion.types import Hit
from hybridsag.judges.base import Candidate, Judge, JudgeUsage, gives_verdicts
from hybridsag.judges.simple import UnavailableJudge
from hybridsag.lexical.contract import LexicalIndex, LexicalQuery
from hybridsag.paths.base import PathResult, Peers
from hybridsag.paths.evidence import (
    EvidencePassage,
    Selection,
    bridge_gaps,
    name_forms,
    select_evidence,
)
from hybridsag.fusion.text.sentences import split_sentences
from hybridsag.settings import JudgeSettings, Sag2Settings
from hybridsag.records.filters import Filters
from hybridsag.records.store import Store

if TYPE_CHECKING:
    from hybridsag.parts import Parts

__all__ = ["COOCCURRENCE_FLOOR", "DIVERSITY_WAIT", "Sag2Retriever", "build", "expansion_terms"]

log = logging.getLogger(__name__)

#: The weight of an expansion term that never shares a sentence with a question term (a floor:
#: such a term is demoted, not lost).
COOCCURRENCE_FLOOR = 0.25
#: Diversity re-rank: each further chunk of the same section waits this many slots.
DIVERSITY_WAIT = 3
#: Sort key of "no rank in this list" (after every real rank).
_UNRANKED = 10**9
#: Decimal places of a judge probability as hits report it.
JUDGE_P_DIGITS = 4

_CAP_RUN = re.compile(r"\b[A-Z][\w'’\-]*(?:\s+[A-Z][\w'’\-]*)+")


@dataclass
class _Cand:
    chunk_id: str
    resource_id: str  # the resource's key (hybridsag.records.store.resource_key)
    title: str
    heading_path: str
    text: str
    bm25_rank: int = 0
    bm25_score: float = 0.0
    expansion_rank: int = 0
    round: int = 0
    dense_rank: int = 0

    @property
    def dense_only(self) -> bool:
        """Only the dense path brought it into the pool: the question's own terms did not
        find it (no BM25 rank) and no expansion round has."""
        return not (self.bm25_rank or self.round)

    def candidate(self) -> Candidate:
        signals: dict[str, float] = {
            "bm25_rank": float(self.bm25_rank),
            "bm25_score": self.bm25_score,
            "expansion_rank": float(self.expansion_rank),
            "round": float(self.round),
        }
        if self.dense_rank:
            signals["dense_rank"] = float(self.dense_rank)
        return Candidate(self.chunk_id, self.title, self.text, signals)


def expansion_terms(
    seeds: Sequence[tuple[str, float]],
    *,
    question_terms: frozenset[str],
    tokenize: Any,
    doc_freqs: Any,
    total_docs: int,
    stopwords: frozenset[str],
    limit: int = 20,
) -> list[tuple[str, float]]:
    """Score candidate expansion terms from seed passages ``(text, seed probability)``.

    A term is a token of the index tokenizer or a run of two or more capitalised words. Its score is
    the sum over seeds of tf x idf x co-occurrence x seed probability, where co-occurrence is 1 when
    the term shares a sentence with a question term and :data:`COOCCURRENCE_FLOOR` otherwise (a
    floor, so a term is demoted rather than lost). Terms whose tokens are all question terms or stop
    words, and terms absent from the index, are dropped. Returns the best ``limit`` as ``(term,
    score)``.
    """
    scores: Counter[str] = Counter()
    term_tokens: dict[str, tuple[str, ...]] = {}
    for text, prob in seeds:
        tf: Counter[str] = Counter()
        cooc: dict[str, bool] = {}
        for sentence in split_sentences(text):
            toks = [t for t in tokenize(sentence) if t not in stopwords]
            runs = [r.lower() for r in _CAP_RUN.findall(sentence)]
            has_q = any(t in question_terms for t in toks)
            for run in runs:
                term_tokens.setdefault(run, tuple(tokenize(run)))
            for term in toks + runs:
                tf[term] += 1
                cooc[term] = cooc.get(term, False) or has_q
            for t in toks:
                term_tokens.setdefault(t, (t,))
        for term, n in tf.items():
            scores[term] += n * (1.0 if cooc[term] else COOCCURRENCE_FLOOR) * prob
    candidates = []
    for term, base in scores.items():
        toks = term_tokens.get(term, (term,))
        if not toks or all(t in question_terms or t in stopwords for t in toks):
            continue
        if not any(ch.isalpha() for ch in term):
            continue  # bare numbers and years expand to noise
        candidates.append((term, base, toks))
    # best base first; a term's idf is at most that of a term in two passages (one passage:
    # dropped below), so once the limit-th score beats that bound for the best base left, no
    # term left can reach the list and its document frequencies are never read
    candidates.sort(key=lambda x: -x[1])
    best_idf = _idf(total_docs, 2)
    out: list[tuple[str, float]] = []
    start, step = 0, max(4 * limit, 1)
    while start < len(candidates):
        batch = candidates[start : start + step]
        start += step
        df = doc_freqs(list({t for _, _, toks in batch for t in toks}))
        for term, base, toks in batch:
            freqs = [df.get(t, 0) for t in toks]
            if not freqs or min(freqs) == 0:
                continue  # absent from the index
            rarest = min(freqs)
            if rarest <= 1:
                continue  # found only in the seed itself: it cannot bring in another passage
            out.append((term, base * _idf(total_docs, rarest)))
        out.sort(key=lambda x: (-x[1], x[0]))
        if start < len(candidates) and len(out) >= limit > 0:
            if out[limit - 1][1] > candidates[start][1] * best_idf:
                break
        step *= 2
    return out[:limit]


def _idf(total_docs: int, rarest: int) -> float:
    """BM25's idf of a term held by ``rarest`` of ``total_docs`` passages (decreasing in
    ``rarest``)."""
    return math.log((total_docs - rarest + 0.5) / (rarest + 0.5) + 1.0)


class _Run:
    """The state of one SAG2 search: the pool, the judge's latest scores, usage and timings."""

    def __init__(self) -> None:
        self.pool: dict[str, _Cand] = {}
        self.probs: dict[str, float] = {}
        self.usage = JudgeUsage()
        self.timings: dict[str, float] = {}
        self.coverage: list[int] = []
        self.trace: list[list[str]] | None = None
        self.degraded: list[str] = []
        self.rounds_done = 0
        self.second_hop = 0
        #: a round's judgement failed: the loop keeps the last judged pool and looks up nothing
        self.judge_failed = False
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        """Add the time since the last lap to stage ``name`` (ms)."""
        now = time.perf_counter()
        self.timings[name] = round(self.timings.get(name, 0.0) + (now - self._t) * 1000, 3)
        self._t = now

    def snapshot(self) -> None:
        """Record the pool size (and, when tracing, its resources) after a round."""
        self.coverage.append(len(self.pool))
        if self.trace is not None:
            self.trace.append(sorted({c.resource_id for c in self.pool.values()}))


@dataclass
class Sag2Trace:
    """Switches for evaluation and fitting: ``resources`` reports the pool's resource ids per
    round in ``usage["pool_resources_per_round"]``; ``on_final_pool(question, candidates)`` is
    called with the final pool before the last order (``scripts/fit_judge.py``)."""

    resources: bool = False
    on_final_pool: Callable[[str, list[Candidate]], None] | None = field(default=None)


class Sag2Retriever:
    """The SAG2 path over a :class:`~hybridsag.lexical.contract.LexicalIndex` and a
    :class:`Judge`."""

    name = "sag2"
    #: the path whose hits join the round-0 pool when it runs in the same search
    joins = ("dense",)

    def __init__(
        self,
        store: Store,
        lexical: LexicalIndex,
        judge: Judge,
        settings: Sag2Settings,
        judge_settings: JudgeSettings,
    ) -> None:
        self.store = store
        self.lexical = lexical
        self.judge = judge
        self.settings = settings
        self.judge_settings = judge_settings
        self.trace = Sag2Trace()

    # ------------------------------------------------------------------------------------------

    def retrieve(
        self,
        query: str,
        *,
        limit: int,
        filters: Filters,
        peers: Peers | None = None,
        rounds: int | None = None,
    ) -> PathResult:
        """Run the loop for ``query``.

        ``peers["dense"]`` (given by :meth:`HybridSearch.run_paths` when the same search runs
        the dense path) returns that path's hits for the same query and filters; its first
        ``sag2.dense_candidates`` join the round-0 pool, so the judge ranks the union. A
        :class:`HybridSagError` from it leaves the pool lexical and marks the result degraded.
        """
        s = self.settings
        rounds = s.rounds if rounds is None else rounds
        recall = s.deep_recall if s.deep else s.recall
        run = _Run()
        if self.trace.resources:
            run.trace = []
        terms = self.lexical.query_terms(query)
        run.lap("tokenize_ms")
        first = self._recall(terms, recall, filters, run)
        self._join_dense((peers or {}).get("dense"), run)
        run.snapshot()
        try:
            self._judge_pool(query, run, provisional=None)
        except JudgeError as exc:
            if self._raises(exc):
                raise
            return self._bm25_order(first[:limit], f"{type(exc).__name__}: {exc}", run)
        expanded: set[str] = set()
        for round_ in range(1, rounds + 1):
            if not self._expand(query, terms, round_, expanded, recall, filters, run):
                break
        ordered, selection = self._final_order(query, run)
        if selection is not None and not run.judge_failed and self._second_hop(
            query, selection, filters, run
        ):
            ordered, selection = self._final_order(query, run)
        if self.trace.on_final_pool is not None:
            self.trace.on_final_pool(query, [c.candidate() for c in run.pool.values()])
        return self._result(ordered, selection, limit, run)

    def _raises(self, exc: JudgeError) -> bool:
        """Whether a judge failure propagates: under ``judge.on_failure = "raise"``, unless it
        is the search's remote budget (:class:`BudgetError`), which always degrades."""
        return self.judge_settings.on_failure == "raise" and not isinstance(exc, BudgetError)

    # -- the steps --------------------------------------------------------------------------------

    def _recall(self, terms: Sequence[str], recall: int, filters: Filters, run: _Run) -> list[Hit]:
        """Round 0: BM25 top ``recall`` for the question's terms, into the pool."""
        first = self.lexical.search(terms, limit=recall, filters=filters, path=self.name)
        run.lap("fts_ms")
        self._add(run.pool, first, rank_field="bm25", round_=0)
        return first

    def _join_dense(self, dense_hits: Callable[[], Sequence[Hit]] | None, run: _Run) -> None:
        """The dense path's top ``dense_candidates`` join the round-0 pool (when it ran)."""
        n = self.settings.dense_candidates
        if dense_hits is None or not n:
            return
        try:
            dhits = [h for h in dense_hits() if h.rank <= n]
        except HybridSagError as exc:  # the pool goes on with lexical candidates alone
            run.degraded.append(f"dense candidates unavailable: {type(exc).__name__}: {exc}")
        else:
            self._add(run.pool, dhits, rank_field="dense", round_=0)
        run.lap("dense_wait_ms")

    def _expand(
        self,
        query: str,
        terms: Sequence[str],
        round_: int,
        expanded: set[str],
        recall: int,
        filters: Filters,
        run: _Run,
    ) -> bool:
        """One expansion round: seeds -> terms -> next-hop queries -> merged candidates ->
        judge the grown pool. False when the loop ends (nothing new, or the judge failed)."""
        s = self.settings
        seeds = [c for c in self._order(run.pool, run.probs) if c not in expanded][: s.seeds]
        if not seeds:
            return False
        expanded.update(seeds)
        new_terms = expansion_terms(
            [(run.pool[c].text, run.probs[c]) for c in seeds],
            question_terms=frozenset(terms),
            tokenize=self.lexical.tokenizer.tokenize,
            doc_freqs=self.lexical.doc_freqs,
            total_docs=max(self.lexical.total_chunks(), 1),
            stopwords=self.lexical.tokenizer.stopwords,
            limit=s.expansion_terms,
        )
        run.lap("expand_terms_ms")
        if not new_terms:
            return False
        merged = self._next_hop_candidates(terms, new_terms, recall, filters, run)
        if not merged:
            return False
        if not self._judge_grown(query, merged, round_, run, kept=f"round {round_ - 1}"):
            return False
        run.rounds_done = round_
        return True

    def _judge_grown(
        self, query: str, found: Sequence[Hit], round_: int, run: _Run, *, kept: str
    ) -> bool:
        """Join ``found`` to the pool as finds of round ``round_`` and judge the grown pool
        (the last scores as provisional). When the judge fails (and ``on_failure`` is not
        ``"raise"``) the unjudged candidates are dropped, a candidate the pool held before is
        as it was, the last order stands, the reason is recorded as keeping ``kept``, and False
        is returned."""
        held = {h.chunk_id: replace(run.pool[h.chunk_id]) for h in found if h.chunk_id in run.pool}
        self._add(run.pool, found, rank_field="expansion", round_=round_)
        run.snapshot()
        try:
            self._judge_pool(query, run, provisional=dict(run.probs))
        except JudgeError as exc:
            if self._raises(exc):
                raise
            run.degraded.append(f"{type(exc).__name__}: {exc} (round {round_}; kept {kept})")
            run.judge_failed = True
            for h in found:
                if h.chunk_id in held:
                    run.pool[h.chunk_id] = held[h.chunk_id]
                else:
                    run.pool.pop(h.chunk_id, None)
            return False
        return True

    def _next_hop_candidates(
        self,
        terms: Sequence[str],
        new_terms: Sequence[tuple[str, float]],
        recall: int,
        filters: Filters,
        run: _Run,
    ) -> list[Hit]:
        """One query "all new terms OR the question's" plus one per new term that must contain
        it, asked of the lexical index in one call (:meth:`LexicalIndex.search_many`); merged
        round-robin by rank, without what the pool already holds; then the pool's candidates
        that only the dense path brought in and these queries find, each with its rank in the
        merge of the lists without the rest of the pool (the next-hop queries finding it are its
        evidence as the next hop). The new finds' ranks are those of the merge without the pool,
        as in a search without dense candidates. A tenant-scoped search (``filters.tenant``)
        finds nothing again: the refound candidate would carry the round query's BM25 score,
        which weighs its words over every tenant's documents, into the judge's probabilities
        (the judge reads it against the question's scores), telling one tenant what another's
        documents hold."""
        question = tuple(terms)
        queries = [
            LexicalQuery(tuple(t for term, _ in new_terms for t in term.split()) + question),
            *(LexicalQuery(question + tuple(term.split()), must=term) for term, _ in new_terms),
        ]
        lists = self.lexical.search_many(queries, limit=recall, filters=filters, path=self.name)
        run.lap("fts_ms")
        new = _round_robin(lists, exclude=run.pool.keys(), limit=recall)
        if filters.tenant is not None:
            return new
        dense_only = {c for c, cand in run.pool.items() if cand.dense_only}
        refound = [
            h
            for h in _round_robin(lists, exclude=run.pool.keys() - dense_only, limit=recall)
            if h.chunk_id in dense_only
        ]
        return new + refound

    def _final_order(self, query: str, run: _Run) -> tuple[list[str], Selection | None]:
        """The judge's order, the diversity re-rank of the top ``diversity_top``, then the
        evidence-set selection of the first ``set_k`` (None when it is off or the judge only
        restates an order)."""
        s = self.settings
        pool = run.pool
        ordered = self._order(pool, run.probs)
        if s.diversity_top > 1:
            ordered = _diversify_ids(
                ordered, s.diversity_top, lambda c: (pool[c].resource_id, pool[c].heading_path)
            )
        selection = None
        if s.set_k and gives_verdicts(self.judge):
            selection = select_evidence(
                query,
                [EvidencePassage(c, pool[c].title, pool[c].text, run.probs[c]) for c in ordered],
                k=s.set_k,
                entity_weight=s.entity_weight,
                bridge_weight=s.bridge_weight,
                relation_floor=s.relation_floor,
            )
            ordered = selection.order
        run.lap("rerank_ms")
        return ordered, selection

    def _second_hop(
        self, query: str, selection: Selection, filters: Filters, run: _Run
    ) -> bool:
        """The targeted second hop: look up the names the selected evidence leaves without a
        passage (title first, else a phrase search of the text), join what is new to the pool
        (as next-hop finds of the round after the last) and judge it again. False when there was
        no gap, nothing new, or the judge failed (then the new candidates are dropped and the
        last judgement stands, marked degraded)."""
        n = self.settings.gap_lookups
        if not n:
            return False
        pool = run.pool
        passages = {
            c: EvidencePassage(c, pool[c].title, pool[c].text, run.probs[c]) for c in pool
        }
        gaps = bridge_gaps(selection, passages)[:n]
        if not gaps:
            return False
        found = _round_robin(
            [self._look_up(name, filters) for name in gaps], exclude=pool.keys(), limit=4 * n
        )
        run.lap("second_hop_ms")
        if not found:
            return False
        round_ = run.rounds_done + 1
        if not self._judge_grown(query, found, round_, run, kept=f"round {round_ - 1}"):
            return False
        run.second_hop = len(found)
        return True

    def _look_up(self, name: str, filters: Filters) -> list[Hit]:
        """Passages about ``name``: the first chunk of each resource whose title is the name
        (:func:`~hybridsag.paths.evidence.name_forms`), else (for a name of two words or more)
        the best two chunks holding the name as a phrase."""
        terms = self.lexical.query_terms(name)
        if not terms:
            return []
        rids = [rid for rid, _ in self.lexical.search_titles(terms, limit=5, filters=filters)]
        records = self.store.resources(rids)
        titled = [r for r in rids if r in records and name in name_forms(records[r].title)]
        if titled:
            first = self.store.first_chunks(titled)
            return [
                Hit(first[rid][0], self.name, i, 0.0, 0.0)
                for i, rid in enumerate((r for r in titled if r in first), start=1)
            ]
        if len(name.split()) < 2:  # one word as a phrase is any passage using the word
            return []
        phrase = " ".join(self.lexical.tokenizer.tokenize(name))
        return self.lexical.search(terms, limit=2, filters=filters, must=phrase, path=self.name)

    def _result(
        self, ordered: Sequence[str], selection: Selection | None, limit: int, run: _Run
    ) -> PathResult:
        verdicts = gives_verdicts(self.judge)
        roles = selection.roles if selection is not None else {}
        shown = list(ordered[:limit])
        # the score never rises down the list: the best probability at or below each rank
        floor = 0.0
        scores = []
        for cid in reversed(shown):
            floor = max(floor, run.probs[cid])
            scores.append(floor)
        scores.reverse()
        hits = []
        for i, (cid, score) in enumerate(zip(shown, scores), start=1):
            cand, p = run.pool[cid], run.probs[cid]
            detail: dict[str, Any] = {
                "resource_id": cand.resource_id,
                "round": cand.round,
                "bm25_rank": cand.bm25_rank,
            }
            if cid in roles:
                detail["evidence"] = roles[cid]
            if not verdicts:  # an order, not a judgement: fusion must not trust it as one
                detail["order_score"] = round(p, JUDGE_P_DIGITS)
            hits.append(
                Hit(
                    chunk_id=cid,
                    path=self.name,
                    rank=i,
                    raw_score=p,
                    score=score,
                    detail=detail,
                    judge_p=round(p, JUDGE_P_DIGITS) if verdicts else None,
                    # first found by an expansion round: the next hop, outside the question's scope
                    next_hop=cand.round >= 1,
                )
            )
        u = run.usage
        return PathResult(
            hits=hits,
            timings=run.timings,
            usage={
                "judge_calls": u.calls,
                "judge_input_tokens": u.input_tokens,
                "judge_seconds": round(u.seconds, 4),
                "pool": len(run.pool),
                "rounds": run.rounds_done,
                "pool_per_round": run.coverage,
                "second_hop": run.second_hop,
                **({"shape": selection.kind} if selection is not None else {}),
                **({"pool_resources_per_round": run.trace} if run.trace is not None else {}),
            },
            degraded="; ".join(run.degraded) or None,
        )

    # ------------------------------------------------------------------------------------------

    def _add(
        self, pool: dict[str, _Cand], hits: Sequence[Hit], *, rank_field: str, round_: int
    ) -> None:
        missing = [h.chunk_id for h in hits if h.chunk_id not in pool]
        records = self.store.chunks(missing) if missing else {}
        for h in hits:
            cand = pool.get(h.chunk_id)
            if cand is None:
                rec = records.get(h.chunk_id)
                if rec is None:
                    continue
                cand = _Cand(
                    h.chunk_id, rec.key, rec.title, rec.heading_path, rec.text, round=round_
                )
                pool[h.chunk_id] = cand
            if rank_field == "bm25" and not cand.bm25_rank:
                cand.bm25_rank, cand.bm25_score = h.rank, h.score
            elif rank_field == "expansion" and not cand.expansion_rank:
                cand.expansion_rank = h.rank
                if cand.dense_only:  # a next-hop find, as in the path alone
                    cand.round = round_
                if not cand.bm25_score:
                    cand.bm25_score = h.score if h.score > 0 else 0.0
            elif rank_field == "dense" and not cand.dense_rank:
                cand.dense_rank = h.rank

    def _judge_pool(
        self, query: str, run: _Run, *, provisional: Mapping[str, float] | None
    ) -> None:
        """Judge the whole pool; the scores replace ``run.probs``. Raises JudgeError when the
        judge fails or answers for other candidates than asked."""
        pool = run.pool
        cands = [c.candidate() for c in pool.values()]
        t0 = time.perf_counter()
        result = self.judge.judge(query, cands, provisional=provisional)
        probs = dict(result.probabilities)
        if set(probs) != set(pool):
            raise JudgeError(
                f"judge {self.judge.name!r} answered {len(probs)} of {len(pool)} candidates"
            )
        u = result.usage
        if not u.seconds:
            u = JudgeUsage(
                u.calls, u.input_tokens, u.output_tokens, time.perf_counter() - t0, u.cached
            )
        run.usage += u
        run.probs = probs
        reason = result.detail.get("degraded")
        if reason and reason not in run.degraded:
            log.warning("judge %s degraded: %s", self.judge.name, reason)
            run.degraded.append(str(reason))
        run.lap("judge_ms")

    @staticmethod
    def _order(pool: Mapping[str, _Cand], probs: Mapping[str, float]) -> list[str]:
        """By probability; ties by BM25 rank (unranked last), then expansion rank, then id."""
        return sorted(
            pool,
            key=lambda c: (
                -round(probs[c], 6),
                pool[c].bm25_rank or _UNRANKED,
                pool[c].expansion_rank or _UNRANKED,
                c,
            ),
        )

    def _bm25_order(self, first: Sequence[Hit], reason: str, run: _Run) -> PathResult:
        """The judge failed for good: BM25 order, marked degraded."""
        log.warning("judge %s failed, sag2 answers in BM25 order: %s", self.judge.name, reason)
        hits = [
            Hit(h.chunk_id, self.name, h.rank, h.raw_score, h.score, {**h.detail, "degraded": True})
            for h in first
        ]
        return PathResult(
            hits=hits,
            timings=dict(run.timings),
            usage={"judge_calls": run.usage.calls, "judge_input_tokens": run.usage.input_tokens},
            degraded="; ".join([*run.degraded, reason]),
        )


def _diversify_ids(ordered: list[str], top: int, section_of: Any) -> list[str]:
    """The first ``top`` ids re-ranked so that each repeat of a section waits
    :data:`DIVERSITY_WAIT` slots; the rest unchanged."""
    head, tail = ordered[:top], ordered[top:]
    seen: Counter[tuple[str, str]] = Counter()
    waiting: list[tuple[int, int, str]] = []
    for i, cid in enumerate(head):
        sec = section_of(cid)
        waiting.append((i + seen[sec] * DIVERSITY_WAIT, i, cid))
        seen[sec] += 1
    return [cid for _, _, cid in sorted(waiting)] + tail


def _round_robin(lists: Sequence[Sequence[Hit]], *, exclude: Any, limit: int) -> list[Hit]:
    """Merge ranked lists by rank (rank 1 of every list, then rank 2, ...), deduplicated by chunk
    id and excluding ``exclude``; the merged hits carry their merged 1-based rank."""
    out: list[Hit] = []
    seen = set(exclude)
    depth = max((len(x) for x in lists), default=0)
    for r in range(depth):
        for hits in lists:
            if r < len(hits):
                h = hits[r]
                if h.chunk_id not in seen:
                    seen.add(h.chunk_id)
                    out.append(
                        Hit(h.chunk_id, h.path, len(out) + 1, h.raw_score, h.score, h.detail)
                    )
                    if len(out) >= limit:
                        return out
    return out


def build(parts: Parts) -> Sag2Retriever:
    """Registry factory: the SAG2 loop over the lexical index and the configured judge. A judge
    that cannot be built (ConfigError: a Jev judge without a key) fails every call instead, so
    the path answers in BM25 order marked degraded, as for a judge that fails at run time."""
    s = parts.settings
    try:
        judge: Judge = parts.judge()
    except ConfigError as exc:
        judge = UnavailableJudge(s.judge.name, str(exc))
    return Sag2Retriever(parts.store, parts.lexical, judge, s.sag2, s.judge)
