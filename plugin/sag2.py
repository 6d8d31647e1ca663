"""The SAG2 lexical-judge path: BM25 recall, a judge, term-expansion rounds, diversity re-rank.

The loop (ARCHITECTURE.md "Query path", defaults from the SAG-Wiki and SAG2 descriptions):

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
   again with last round's scores as provisional. A round that brings no new term or candidate
   ends the loop;
4. a diversity re-rank of the top ``diversity_top`` so they do not all come from one section.

If the judge fails for good, the path returns BM25 order with ``degraded`` and the reason, or
raises when ``judge.on_failure = "raise"``.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hybridsag.chunker import split_sentences
from hybridsag.errors import HybridSagError, JudgeError
from hybridsag.fusion.types import Hit
from hybridsag.judges.base import Candidate, Judge, JudgeUsage
from hybridsag.lexical import Fts5LexicalIndex
from hybridsag.retrievers import PathResult
from hybridsag.settings import JudgeSettings, Sag2Settings
from hybridsag.store import Filters, Store

if TYPE_CHECKING:
    from hybridsag.search import HybridSearch

__all__ = ["Sag2Retriever", "expansion_terms"]

_CAP_RUN = re.compile(r"\b[A-Z][\w'’\-]*(?:\s+[A-Z][\w'’\-]*)+")


@dataclass
class _Cand:
    chunk_id: str
    resource_id: str
    title: str
    heading_path: str
    text: str
    bm25_rank: int = 0
    bm25_score: float = 0.0
    expansion_rank: int = 0
    round: int = 0
    dense_rank: int = 0

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

    A term is a token of the index tokenizer or a run of two or more capitalised words. Its score
    is the sum over seeds of tf x idf x co-occurrence x seed probability, where co-occurrence is 1
    when the term shares a sentence with a question term and 0.25 otherwise (a floor, so a term
    is demoted rather than lost). Terms whose tokens are all question terms or stop words, and
    terms absent from the index, are dropped. Returns the best ``limit`` as ``(term, score)``.
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
            scores[term] += n * (1.0 if cooc[term] else 0.25) * prob
    candidates = []
    for term, base in scores.items():
        toks = term_tokens.get(term, (term,))
        if not toks or all(t in question_terms or t in stopwords for t in toks):
            continue
        if not any(ch.isalpha() for ch in term):
            continue  # bare numbers and years expand to noise
        candidates.append((term, base, toks))
    all_tokens = list({t for _, _, toks in candidates for t in toks})
    df = doc_freqs(all_tokens)
    out = []
    for term, base, toks in candidates:
        freqs = [df.get(t, 0) for t in toks]
        if not freqs or min(freqs) == 0:
            continue  # absent from the index
        rarest = min(freqs)
        if rarest <= 1:
            continue  # found only in the seed itself: it cannot bring in another passage
        idf = math.log((total_docs - rarest + 0.5) / (rarest + 0.5) + 1.0)
        out.append((term, base * idf))
    out.sort(key=lambda x: (-x[1], x[0]))
    return out[:limit]


class Sag2Retriever:
    """The SAG2 path over the FTS5 lexical index and a :class:`Judge`."""

    name = "sag2"

    def __init__(
        self,
        store: Store,
        lexical: Fts5LexicalIndex,
        judge: Judge,
        settings: Sag2Settings,
        judge_settings: JudgeSettings,
    ) -> None:
        self.store = store
        self.lexical = lexical
        self.judge = judge
        self.settings = settings
        self.judge_settings = judge_settings
        self.trace = False  # eval: report the pool's resource ids per round
        # fitting scripts: called with (question, final pool candidates) before the last order
        self.on_final_pool: Any = None

    @classmethod
    def build(cls, hs: HybridSearch, *, judge: Judge | None = None) -> Sag2Retriever:
        """Wire the path from a :class:`HybridSearch`: the configured judge (the offline
        ``features`` judge reads the passage vectors kept in the store)."""
        s = hs.settings
        if judge is None:
            judge = hs._judge
        if judge is None:
            judge = make_configured_judge(hs)
        return cls(hs.store, hs.lexical, judge, s.sag2, s.judge)

    # ------------------------------------------------------------------------------------------

    def retrieve(
        self,
        query: str,
        *,
        limit: int,
        filters: Filters,
        rounds: int | None = None,
        dense_hits: Callable[[], Sequence[Hit]] | None = None,
    ) -> PathResult:
        """Run the loop for ``query``.

        ``dense_hits`` (given by :meth:`HybridSearch.run_paths` when the same search runs the
        dense path) returns that path's hits for the same query and filters; its first
        ``sag2.dense_candidates`` join the round-0 pool, so the judge ranks the union. A
        :class:`HybridSagError` from it leaves the pool lexical and marks the result degraded.
        """
        s = self.settings
        rounds = s.rounds if rounds is None else rounds
        recall = s.deep_recall if s.deep else s.recall
        timings: dict[str, float] = {}
        t = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal t
            now = time.perf_counter()
            timings[name] = round(timings.get(name, 0.0) + (now - t) * 1000, 3)
            t = now

        terms = self.lexical.query_terms(query)
        lap("tokenize_ms")
        first = self.lexical.search(terms, limit=recall, filters=filters, path=self.name)
        lap("fts_ms")
        pool: dict[str, _Cand] = {}
        self._add(pool, first, rank_field="bm25", round_=0)
        degraded = None
        if dense_hits is not None and s.dense_candidates:
            try:
                dhits = [h for h in dense_hits() if h.rank <= s.dense_candidates]
            except HybridSagError as exc:  # the pool goes on with lexical candidates alone
                degraded = f"dense candidates unavailable: {type(exc).__name__}: {exc}"
            else:
                self._add(pool, dhits, rank_field="dense", round_=0)
            lap("dense_wait_ms")
        coverage = [len(pool)]
        trace = [sorted({c.resource_id for c in pool.values()})] if self.trace else None
        usage = JudgeUsage()
        try:
            probs, u = self._judge(query, pool, provisional=None)
            usage += u
        except JudgeError as exc:
            if self.judge_settings.on_failure == "raise":
                raise
            return self._degraded(first[:limit], f"{type(exc).__name__}: {exc}", timings, usage)
        lap("judge_ms")
        expanded: set[str] = set()
        question_terms = frozenset(terms)
        rounds_done = 0
        for round_ in range(1, rounds + 1):
            seeds = [c for c in self._order(pool, probs) if c not in expanded][: s.seeds]
            if not seeds:
                break
            expanded.update(seeds)
            new_terms = expansion_terms(
                [(pool[c].text, probs[c]) for c in seeds],
                question_terms=question_terms,
                tokenize=self.lexical.tokenizer.tokenize,
                doc_freqs=self.lexical.doc_freqs,
                total_docs=max(self.lexical.total_chunks(), 1),
                stopwords=self.lexical.tokenizer.stopwords,
                limit=s.expansion_terms,
            )
            lap("expand_terms_ms")
            if not new_terms:
                break
            lists = [
                self.lexical.search(
                    [t for term, _ in new_terms for t in term.split()] + list(terms),
                    limit=recall,
                    filters=filters,
                    path=self.name,
                )
            ]
            for term, _ in new_terms:
                lists.append(
                    self.lexical.search(
                        list(terms) + term.split(),
                        limit=recall,
                        filters=filters,
                        must=term,
                        path=self.name,
                    )
                )
            lap("fts_ms")
            merged = _round_robin(lists, exclude=pool.keys(), limit=recall)
            if not merged:
                break
            self._add(pool, merged, rank_field="expansion", round_=round_)
            coverage.append(len(pool))
            if trace is not None:
                trace.append(sorted({c.resource_id for c in pool.values()}))
            try:
                probs, u = self._judge(query, pool, provisional=probs)
                usage += u
            except JudgeError as exc:
                if self.judge_settings.on_failure == "raise":
                    raise
                degraded = f"{type(exc).__name__}: {exc} (round {round_}; kept round {round_ - 1})"
                for h in merged:  # unjudged: drop this round's candidates, keep the last order
                    pool.pop(h.chunk_id, None)
                break
            lap("judge_ms")
            rounds_done = round_
        if self.on_final_pool is not None:
            self.on_final_pool(query, [c.candidate() for c in pool.values()])
        ordered = self._order(pool, probs)
        if s.diversity_top > 1:
            ordered = _diversify_ids(
                ordered, s.diversity_top, lambda c: (pool[c].resource_id, pool[c].heading_path)
            )
        lap("rerank_ms")
        score_key = "judge_p" if getattr(self.judge, "verdicts", True) else "order_score"
        hits = [
            Hit(
                chunk_id=cid,
                path=self.name,
                rank=i,
                raw_score=probs[cid],
                score=probs[cid],
                detail={
                    "resource_id": pool[cid].resource_id,
                    score_key: round(probs[cid], 4),
                    "round": pool[cid].round,
                    "bm25_rank": pool[cid].bm25_rank,
                },
                # first found by an expansion round: the next hop, outside the question's scope
                derived=pool[cid].round >= 1,
            )
            for i, cid in enumerate(ordered[:limit], start=1)
        ]
        return PathResult(
            hits=hits,
            timings=timings,
            usage={
                "judge_calls": usage.calls,
                "judge_input_tokens": usage.input_tokens,
                "judge_seconds": round(usage.seconds, 4),
                "pool": len(pool),
                "rounds": rounds_done,
                "pool_per_round": coverage,
                **({"pool_resources_per_round": trace} if trace is not None else {}),
            },
            degraded=degraded,
        )

    # ------------------------------------------------------------------------------------------

    def _add(self, pool: dict[str, _Cand], hits: Sequence[Hit], *, rank_field: str, round_: int) -> None:
        missing = [h.chunk_id for h in hits if h.chunk_id not in pool]
        records = self.store.chunks(missing) if missing else {}
        for h in hits:
            cand = pool.get(h.chunk_id)
            if cand is None:
                rec = records.get(h.chunk_id)
                if rec is None:
                    continue
                cand = _Cand(h.chunk_id, rec.resource_id, rec.title, rec.heading_path, rec.text, round=round_)
                pool[h.chunk_id] = cand
            if rank_field == "bm25" and not cand.bm25_rank:
                cand.bm25_rank, cand.bm25_score = h.rank, h.score
            elif rank_field == "expansion" and not cand.expansion_rank:
                cand.expansion_rank = h.rank
                if not cand.bm25_score:
                    cand.bm25_score = h.score if h.score > 0 else 0.0
            elif rank_field == "dense" and not cand.dense_rank:
                cand.dense_rank = h.rank

    def _judge(
        self, query: str, pool: Mapping[str, _Cand], *, provisional: Mapping[str, float] | None
    ) -> tuple[dict[str, float], JudgeUsage]:
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
            u = JudgeUsage(u.calls, u.input_tokens, u.output_tokens, time.perf_counter() - t0, u.cached)
        return probs, u

    @staticmethod
    def _order(pool: Mapping[str, _Cand], probs: Mapping[str, float]) -> list[str]:
        """By probability; ties by BM25 rank (unranked last), then expansion rank, then id."""
        big = 10**9
        return sorted(
            pool,
            key=lambda c: (
                -round(probs[c], 6),
                pool[c].bm25_rank or big,
                pool[c].expansion_rank or big,
                c,
            ),
        )

    def _degraded(
        self, first: Sequence[Hit], reason: str, timings: Mapping[str, float], usage: JudgeUsage
    ) -> PathResult:
        hits = [
            Hit(h.chunk_id, self.name, h.rank, h.raw_score, h.score, {**h.detail, "degraded": True})
            for h in first
        ]
        return PathResult(
            hits=hits,
            timings=dict(timings),
            usage={"judge_calls": usage.calls, "judge_input_tokens": usage.input_tokens},
            degraded=reason,
        )


def _diversify_ids(ordered: list[str], top: int, section_of: Any) -> list[str]:
    head, tail = ordered[:top], ordered[top:]
    seen: Counter[tuple[str, str]] = Counter()
    placed: list[str] = []
    waiting: list[tuple[int, int, str]] = []
    for i, cid in enumerate(head):
        sec = section_of(cid)
        waiting.append((i + seen[sec] * 3, i, cid))  # each repeat of a section waits 3 slots
        seen[sec] += 1
    placed = [cid for _, _, cid in sorted(waiting)]
    return placed + tail


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
                    out.append(Hit(h.chunk_id, h.path, len(out) + 1, h.raw_score, h.score, h.detail))
                    if len(out) >= limit:
                        return out
    return out


def make_configured_judge(hs: HybridSearch) -> Judge:
    """The judge named in settings; the offline one reads vectors from the store."""
    from hybridsag.judges import base
    from hybridsag.judges.features import FeatureJudge, load_weights

    s = hs.settings
    name = s.judge.name
    if name == "features":
        vectors = embed_query = None
        if hs.dense_enabled:
            try:
                emb = hs.embedder()
            except Exception:  # noqa: BLE001 - no embedder: lexical + bridge features only
                emb = None
            if emb is not None:
                store = hs.store

                def vectors(ids: Sequence[str]) -> dict[str, np.ndarray]:
                    raw = store.chunk_vectors(ids)
                    return {k: np.frombuffer(v, dtype=np.float32) for k, v in raw.items()}

                def embed_query(q: str) -> np.ndarray:
                    return np.asarray(emb.encode([q], kind="query")[0], dtype=np.float32)

        return FeatureJudge(
            tokens=hs.tokenizer.tokenize,
            weights=load_weights(s.judge.weights_file),
            vectors=vectors,
            embed_query=embed_query,
        )
    if name == "none":
        from hybridsag.judges.simple import NoneJudge

        return NoneJudge()
    if name == "jev":
        import hybridsag.judges.jev  # noqa: F401 - registers "jev"
    if name == "cross-encoder":
        import hybridsag.judges.cross_encoder  # noqa: F401 - registers "cross-encoder"
    return base.make_judge(name, s)
