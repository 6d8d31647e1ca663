"""Captured runs for fitting the judge and choosing fusion defaults offline.

Fitting the offline judge and comparing fusion methods across several labelled sets would mean
running every path for every question again for each candidate setting. Instead,
:func:`capture_set` runs each question once with the offline engine
(:func:`hybridsag.evaluation.offline_runs.capture`), as a default fused search runs it (the SAG2 loop
beside the dense path, whose top hits join its pool; the bm25 and title paths beside them), and
keeps what every later experiment needs:

- the SAG2 loop's final pool as the judge's pass-2 feature rows (``judge.features``), with each
  candidate's BM25 and expansion ranks and round, so any judge weights re-score it: the sag2
  path's order under other weights is the pool sorted by the new probabilities (exact in
  passage mode, where the diversity re-rank has nothing to move; the pool itself was grown with
  the capture's weights);
- what the search's fusion step reads (:class:`hybridsag.search.FusionInput`): every path's
  hits, the query-level facts the trust step reads from the index and the embedder, and what
  fusion's rules may read of every chunk seen, the pool's included; a fusion choice is scored
  over them with :func:`hybridsag.evaluation.offline_runs.fused`, the search's own fusion step.

``scripts/fit_judge.py`` and ``benchmarks/fusion_loso.py`` read these captures (cached by set,
question limit and feature names). The capture's judge uses the hand-set weights for pass 1 and
the expansion seeds, so that it does not depend on the weights being fitted.
"""

from __future__ import annotations

import hashlib
import pickle
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from hybridsag.fusion import ChunkView, Hit, QueryFacts
from hybridsag.judges.features import DENSE_FEATURES, FEATURE_NAMES, FeatureWeights
from hybridsag.evaluation.offline_runs import CapturedQuestion
from hybridsag.search import FusionInput

__all__ = [
    "CAPTURE_VERSION",
    "RANK_METRICS",
    "CapturedQuery",
    "CapturedSet",
    "JudgeFit",
    "capture_set",
    "fit_judge",
    "fit_logistic",
    "judge_fit_of",
    "judge_rows",
    "mean_metrics",
    "resource_ranking",
    "sag2_hits",
]

#: The metrics the fitting and tuning reports give (``hybridsag.evaluation.measures.metrics_for`` keys).
RANK_METRICS = ("recall@1", "recall@2", "recall@5", "recall@10", "ndcg@10")

#: Bump when what a capture holds changes (older cached captures are then ignored).
CAPTURE_VERSION = 5  # 5: views carry the stored title norm and chunk facts
#: The paths a capture runs (sag2 joins the dense path's hits into its pool).
CAPTURE_PATHS = ("sag2", "dense", "title", "bm25")


@dataclass
class CapturedQuery:
    """One question as the offline engine captured it (:class:`CapturedQuestion`: its runs,
    the chunks fusion may see, the SAG2 pool's among them, the trust step's query facts) and
    the SAG2 pool (features and ranks)."""

    question: CapturedQuestion
    pool_ids: list[str]
    pool_x: np.ndarray
    pool_ranks: list[tuple[int, int, int]]  # (bm25 rank, expansion rank, round); 0 = none

    @property
    def gold(self) -> frozenset[str]:
        return self.question.gold

    @property
    def facts(self) -> QueryFacts:
        facts = self.question.fusion_in.facts
        assert facts is not None  # a capture asks for the facts
        return facts


@dataclass
class CapturedSet:
    name: str
    queries: list[CapturedQuery]
    #: every captured question's chunk views (fusion's, and the SAG2 pools')
    views: dict[str, ChunkView]
    info: dict[str, Any] = field(default_factory=dict)


def capture_set(
    folder: Path,
    *,
    cache: Path,
    limit: int | None = None,
    depth: int = 100,
) -> CapturedSet:
    """Index ``folder`` (a BEIR-style set) in a temporary data dir and capture every question
    with the offline engine (:func:`hybridsag.evaluation.offline_runs.capture`, paths ``CAPTURE_PATHS``
    at ``fusion.depth = depth``; see the module docstring). Passage embeddings are cached
    under ``cache``; the capture itself is cached under ``cache/captures``."""
    from hybridsag.vectors.embed_cache import CachedEmbedder
    from hybridsag.vectors.embedder import make_embedder
    from hybridsag.evaluation.harness import load_dataset, questions_of
    from hybridsag.evaluation.offline_runs import capture
    from hybridsag.search import HybridSearch
    from hybridsag.settings import Settings
    from hybridsag.records.filters import Filters

    ds = load_dataset(folder, limit=limit)
    if limit is not None and limit >= len(load_dataset(folder).queries):
        limit = None  # the whole set: the same capture
    key = hashlib.sha256(
        f"{CAPTURE_VERSION}|{ds.digest}|{limit}|{depth}|{','.join(FEATURE_NAMES)}".encode()
    ).hexdigest()[:16]
    path = cache / "captures" / f"{ds.name}-{key}.pkl"
    if path.is_file():
        with path.open("rb") as fh:
            loaded: CapturedSet = pickle.load(fh)
        return loaded
    pools: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            chunking={"mode": "passage"},
            judge={"weights_file": "hand-set"},
            fusion={"depth": depth},
        )
        inner = make_embedder(settings)
        assert inner is not None
        with HybridSearch(settings, embedder=CachedEmbedder(inner, cache)) as hs:
            hs.ingest_jsonl(ds.corpus_path, mode="passage")
            sag2 = hs.components.retriever("sag2")
            judge = sag2.judge  # type: ignore[attr-defined]
            pool: dict[str, Any] = {}

            def on_pool(question: str, cands: list) -> None:  # type: ignore[type-arg]
                feats, _ = judge.features(question, cands)
                pool["ids"] = [c.chunk_id for c in cands]
                pool["x"] = feats
                pool["ranks"] = [
                    (
                        int(c.signals.get("bm25_rank", 0)),
                        int(c.signals.get("expansion_rank", 0)),
                        int(c.signals.get("round", 0)),
                    )
                    for c in cands
                ]

            def with_pool(qid: str, fusion_in: FusionInput) -> FusionInput:
                pools[qid] = dict(pool)
                pool.clear()
                pool_hits = [Hit(c, "sag2", 1, 0.0, 0.0) for c in pools[qid].get("ids", [])]
                seen = hs.visible_chunks({"sag2": pool_hits}, Filters())
                return replace(fusion_in, views={**seen, **fusion_in.views})

            sag2.trace.on_final_pool = on_pool  # type: ignore[attr-defined]
            cap = capture(hs, questions_of(ds), CAPTURE_PATHS, on_question=with_pool)
    queries = [
        CapturedQuery(
            question=q,
            pool_ids=list(pools[q.qid].get("ids", [])),
            pool_x=pools[q.qid].get("x", np.zeros((0, len(FEATURE_NAMES)))),
            pool_ranks=list(pools[q.qid].get("ranks", [])),
        )
        for q in cap.questions
    ]
    views = {cid: v for q in cap.questions for cid, v in q.fusion_in.views.items()}
    captured = CapturedSet(ds.name, queries, views, {"folder": str(folder), "limit": limit})
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        pickle.dump(captured, fh)
    return captured


@dataclass(frozen=True)
class JudgeFit:
    """Judge weights as vectors over ``FEATURE_NAMES`` with the bias last: ``full`` for a
    question the embedder reads, ``lexical`` (dense columns zero) for one it cannot; the judge
    blends them by the share it reads (:meth:`FeatureWeights.blended`)."""

    full: np.ndarray
    lexical: np.ndarray | None = None

    def blended(self, reads: float) -> tuple[np.ndarray, float]:
        if self.lexical is None or reads >= 1.0:
            return self.full[:-1], float(self.full[-1])
        w = reads * self.full + (1.0 - reads) * self.lexical
        return w[:-1], float(w[-1])

    def as_json(self) -> dict[str, dict[str, float]]:
        """``{"weights": ..., "lexical_weights": ...}`` as ``load_weights`` reads them."""
        def named(vec: np.ndarray) -> dict[str, float]:
            out = {n: round(float(v), 4) for n, v in zip(FEATURE_NAMES, vec[:-1])}
            out["bias"] = round(float(vec[-1]), 4)
            return out

        data = {"weights": named(self.full)}
        if self.lexical is not None:
            data["lexical_weights"] = {
                n: v for n, v in named(self.lexical).items() if n not in DENSE_FEATURES
            }
        return data


def sag2_hits(
    query: CapturedQuery,
    judge: JudgeFit,
    *,
    depth: int = 100,
    views: Mapping[str, ChunkView] | None = None,
) -> list[Hit]:
    """The sag2 path's hits for a captured question under ``judge``: the pool by probability,
    ties by BM25 rank then expansion rank then chunk id, as the path orders it; ``judge_p``
    rounded as the path rounds it, ``next_hop`` for later rounds."""
    if not query.pool_ids:
        return []
    reads = query.facts.embedder_reads
    weights, bias = judge.blended(1.0 if reads is None else min(1.0, max(0.0, reads)))
    z = query.pool_x @ weights + bias
    probs = 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))
    big = 10**9
    order = sorted(
        range(len(query.pool_ids)),
        key=lambda i: (
            -round(float(probs[i]), 6),
            query.pool_ranks[i][0] or big,
            query.pool_ranks[i][1] or big,
            query.pool_ids[i],
        ),
    )
    hits = []
    for rank, i in enumerate(order[:depth], start=1):
        cid = query.pool_ids[i]
        p = float(probs[i])
        rid = views[cid].resource_id if views is not None and cid in views else cid
        hits.append(
            Hit(
                cid, "sag2", rank, p, p,
                {"resource_id": rid, "round": query.pool_ranks[i][2],
                 "bm25_rank": query.pool_ranks[i][0]},
                judge_p=round(p, 4),
                next_hop=query.pool_ranks[i][2] >= 1,
            )
        )
    return hits


def resource_ranking(hits: Sequence[Any], views: Mapping[str, ChunkView]) -> list[str]:
    """Resource ids of ranked hits (or fused hits), first occurrence kept."""
    return list(dict.fromkeys(views[h.chunk_id].resource_id for h in hits if h.chunk_id in views))


def judge_rows(captured: CapturedSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The captured pools' feature rows, labels (1 when the passage's resource is gold) and the
    share of each row's question that the embedder reads (1.0 when unknown)."""
    xs, ys, rs = [], [], []
    for q in captured.queries:
        if not q.pool_ids:
            continue
        xs.append(q.pool_x)
        ys.append([1.0 if _resource(c, captured.views) in q.gold else 0.0 for c in q.pool_ids])
        reads = q.facts.embedder_reads
        rs.append(np.full(len(q.pool_ids), 1.0 if reads is None else min(1.0, max(0.0, reads))))
    if not xs:
        return np.zeros((0, len(FEATURE_NAMES))), np.zeros(0), np.zeros(0)
    return np.vstack(xs), np.concatenate([np.asarray(y) for y in ys]), np.concatenate(rs)


def _resource(chunk_id: str, views: Mapping[str, ChunkView]) -> str:
    view = views.get(chunk_id)
    return view.resource_id if view is not None else chunk_id.split("@")[0]


def fit_logistic(
    x: np.ndarray,
    y: np.ndarray,
    *,
    l2: float = 1.0,
    iters: int = 50,
    sample_weight: np.ndarray | None = None,
) -> np.ndarray:
    """Weights (bias last) maximising the weighted, L2-penalised log-likelihood of a logistic
    regression (Newton's method; the bias is not penalised)."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    sw = np.ones(len(x)) if sample_weight is None else sample_weight
    w = np.zeros(xb.shape[1])
    penalty = np.full(xb.shape[1], l2)
    penalty[-1] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(xb @ w, -50, 50)))
        grad = xb.T @ (sw * (p - y)) + penalty * w
        hess = (xb * (sw * p * (1 - p))[:, None]).T @ xb + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return w


def fit_judge(
    sets: Sequence[CapturedSet],
    *,
    l2: float = 1.0,
    set_weights: Mapping[str, float] | None = None,
) -> JudgeFit:
    """Judge weights fitted on the captured pools of ``sets``, each set weighing
    ``set_weights[name]`` (1.0 when not given) in the fit whatever its size (a row weighs
    inversely to its set's row count): ``full`` on the rows as captured,
    each also weighed by the share of its question the embedder reads (the judge uses these
    weights in that proportion), ``lexical`` on all the rows with every dense column at zero."""
    named = [(s.name, judge_rows(s)) for s in sets]
    parts = [p for _n, p in named if len(p[1])]
    share = [(set_weights or {}).get(n, 1.0) for n, p in named if len(p[1])]
    x = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    reads = np.concatenate([p[2] for p in parts])
    sw = np.concatenate([np.full(len(p[1]), w / len(p[1])) for p, w in zip(parts, share)])
    sw *= len(y) / sw.sum()
    full = fit_logistic(x, y, l2=l2, sample_weight=sw * reads)
    x_lex = x.copy()
    x_lex[:, [i for i, n in enumerate(FEATURE_NAMES) if n in DENSE_FEATURES]] = 0.0
    lexical = fit_logistic(x_lex, y, l2=l2, sample_weight=sw)
    return JudgeFit(full, lexical)


def mean_metrics(rankings: Sequence[tuple[Sequence[str], frozenset[str]]]) -> dict[str, float]:
    """Mean :data:`RANK_METRICS` over ``(ranked resource ids, gold)`` pairs."""
    from hybridsag.evaluation.measures import metrics_for

    totals = dict.fromkeys(RANK_METRICS, 0.0)
    for ranked, gold in rankings:
        m = metrics_for(list(ranked), gold)
        for k in RANK_METRICS:
            totals[k] += m[k]
    n = max(len(rankings), 1)
    return {k: v / n for k, v in totals.items()}


def judge_fit_of(weights: FeatureWeights) -> JudgeFit:
    """A :class:`JudgeFit` of loaded weights (``load_weights``)."""
    full = np.append(weights.vector(), weights.bias)
    if weights.lexical is None:
        return JudgeFit(full)
    lex = FeatureWeights(weights.lexical, weights.source)
    return JudgeFit(full, np.append(lex.vector(), lex.bias))
