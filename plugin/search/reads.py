"""The read side behind :class:`~hybridsag.search.HybridSearch`: :class:`Searcher` runs the
recall paths of a search concurrently in its thread pool, reads what fusion may see, fuses,
scores the confidence and builds the response. The façade documents each operation; this module
does them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from hybridsag.components import Components
from hybridsag.errors import BudgetError, HybridSagError, JudgeError, QueryError
from hybridsag.fusion import ChunkView, FusedHit, Hit, QueryFacts, Trust, monotone_scores
from hybridsag.lexical.tokenizer import has_cjk
from hybridsag.paths import PATHS, PathResult, path_names, path_spec
from hybridsag.paths.query import validate_query
from hybridsag.paths.query_facts import query_facts
from hybridsag.records.filters import Filters
from hybridsag.records.rows import ChunkRecord, ResourceRecord
from hybridsag.remote_calls import QueryMeter, metered, submit
from hybridsag.request import SearchOptions
from hybridsag.results import SearchResponse
from hybridsag.search.resources import stale_reason
from hybridsag.search.shown import build_result, copy_of, places, trust_summary
from hybridsag.search.steps import (
    FusionInput,
    PathRuns,
    confidence_step,
    fuse_step,
    next_hop_slots,
)

__all__ = ["PATH_WORKERS", "Searcher"]

log = logging.getLogger(__name__)

#: Threads of the pool the paths of concurrent searches share.
PATH_WORKERS = 4


class Searcher:
    """The read side of one :class:`~hybridsag.search.HybridSearch`: its parts' searches, over
    a pool of :data:`PATH_WORKERS` threads the paths of concurrent searches share (closed by
    :meth:`close`, which waits for the searches running).

    Args:
        components: The parts to search with (the façade's).
    """

    def __init__(self, components: Components) -> None:
        self.components = components
        self.settings = components.settings
        self._pool = ThreadPoolExecutor(
            max_workers=PATH_WORKERS, thread_name_prefix="hybridsag-path"
        )

    def close(self) -> None:
        """Stop the path threads, waiting for the searches running."""
        self._pool.shutdown(wait=True)

    def resolve_paths(self, paths: Sequence[str] | str | None) -> tuple[str, ...]:
        """:meth:`HybridSearch.resolve_paths <hybridsag.search.HybridSearch.resolve_paths>`."""
        if isinstance(paths, str):
            chosen: tuple[str, ...] = tuple(p.strip() for p in paths.split(",") if p.strip())
        else:
            chosen = tuple(paths) if paths else self.settings.search.paths
        for name in chosen:
            if name not in PATHS:
                raise QueryError(f"unknown path {name!r}; valid: {', '.join(path_names())}")
        if not self.components.dense_enabled:
            chosen = tuple(p for p in chosen if not PATHS[p].needs_dense)
        if not chosen:
            raise QueryError("no retrieval path enabled")
        return tuple(dict.fromkeys(chosen))

    def warm(
        self, paths: Sequence[str] | str | None = None, *, query: str = ""
    ) -> dict[str, float]:
        """:meth:`HybridSearch.warm <hybridsag.search.HybridSearch.warm>`."""
        names = self.resolve_paths(paths)
        parts = self.components
        spent: dict[str, float] = {}
        if has_cjk(query):
            spent["tokenizer_ms"] = round(parts.tokenizer.warm() * 1000, 3)
        t0 = time.perf_counter()
        dense = any(PATHS[name].needs_dense for name in names)
        vectors = parts.dense_enabled and any(PATHS[name].reads_vectors for name in names)
        model: Future[None] | None = None
        if vectors:  # started first: it overlaps the Milvus open
            model = self._pool.submit(self._warm_model, query)
        milvus_ok = True
        if dense:
            try:  # opens Milvus (loads the model only when no dimension is recorded)
                parts.dense_index()
            except HybridSagError:
                milvus_ok = False  # the dense path fails in the search and says why
            t1 = time.perf_counter()
            spent["milvus_ms"] = round((t1 - t0) * 1000, 3)
            t0 = t1
        if model is None and dense and milvus_ok:  # the query embedding of the dense path
            model = self._pool.submit(self._warm_model, query)
        if model is not None:
            model.result()
            t1 = time.perf_counter()
            spent["model_ms"] = round((t1 - t0) * 1000, 3)
            t0 = t1
        for name in names:
            try:
                parts.retriever(name)
            except HybridSagError:
                pass
        spent["paths_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        return spent

    def _warm_model(self, query: str) -> None:
        """Load the embedding model and embed ``query`` when it is a valid one (the vector
        stays in the embedder's query memo for the search); a failure is left for the search
        to report."""
        try:
            embedder = self.components.embedder()
            embedder.dimension  # noqa: B018 - loads the model
            if query:
                text = validate_query(query, max_chars=self.settings.query.max_chars)
                embedder.encode([text], kind="query")
        except HybridSagError:
            pass

    def run_path(self, name: str, query: str, *, limit: int, filters: Filters) -> PathResult:
        """:meth:`HybridSearch.run_path <hybridsag.search.HybridSearch.run_path>`."""
        with metered(self._meter()) as meter:
            result = self.components.retriever(name).retrieve(query, limit=limit, filters=filters)
        usage = _with_remote(result.usage, meter)
        if usage is result.usage:
            return result
        return PathResult(result.hits, result.timings, usage, result.degraded)

    def _meter(self) -> QueryMeter:
        """A fresh meter with the search's remote budget (``search.remote_budget_*``)."""
        s = self.settings.search
        return QueryMeter(max_calls=s.remote_budget_calls, max_ms=s.remote_budget_ms)

    def search(self, query: str, options: SearchOptions) -> SearchResponse:
        """:meth:`HybridSearch.search <hybridsag.search.HybridSearch.search>`, its options
        built."""
        t_start = time.perf_counter()
        s = self.settings
        query = validate_query(query, max_chars=s.query.max_chars)
        top_k = s.search.top_k if options.top_k is None else options.top_k
        flt = options.scope()
        names = self.resolve_paths(options.paths)
        fusion_weights = s.fusion.weights if options.weights is None else options.weights
        judge_order = options.judge_order
        min_confidence = options.min_confidence
        explain = options.explain
        include_stale = (
            s.search.include_stale if options.include_stale is None else options.include_stale
        )
        depth = max(s.fusion.depth, top_k)
        with metered(self._meter()) as meter:  # every remote call is made by a path
            ran = self.run_paths(names, query, limit=depth, filters=flt)
        timings, reasons = ran.timings, ran.reasons
        t_fuse = time.perf_counter()
        fusion_in = self.fusion_input(names, query, ran, flt, facts=s.fusion.trust)
        model = self.components.trust_model()
        # the hits a response shows (the confidence reads the first two); more are fused
        # only when stale files hold some of them back (below)
        window = max(top_k, 2)
        step = partial(
            fuse_step, fusion_in, s.fusion, model, weights=fusion_weights, judge_order=judge_order
        )
        ruled, trust = step(limit=window)
        hidden = fusion_in.hidden
        # the confidence is part of the fusion step's time (it reads what fusion made)
        model = self.components.confidence_model()
        confidence, features = confidence_step(
            fusion_in, ruled, trust, s.fusion, self.components.tokenizer, model
        )
        # nothing found: no top result answers the query, and nothing matches it
        match = 0.0 if features is None else model.predict_match(features)
        if confidence is None:
            confidence = 0.0
        timings["fusion_ms"] = round((time.perf_counter() - t_fuse) * 1000, 3)
        shown: list[tuple[FusedHit, str | None, dict[str, ChunkRecord]]] = []
        hidden_stale: list[dict[str, Any]] = []
        reasons_of: dict[str, str | None] = {}  # one stat per resource
        for f, rec, resources, records in self._shown(ruled, top_k, flt, step, window):
            if rec.key not in reasons_of:
                reasons_of[rec.key] = stale_reason(resources[rec.key])
            stale = reasons_of[rec.key]
            if stale is not None and not include_stale:
                hidden_stale.append(
                    {
                        "chunk_id": rec.chunk_id,
                        "resource_id": rec.resource_id,
                        "tenant": rec.tenant,
                        "reason": stale,
                    }
                )
                continue
            shown.append((f, stale, records))
            if len(shown) >= top_k:
                break
        listed = {c for f, _stale, _recs in shown for c in (f.chunk_id, *f.merged)}
        one_hop = None if next_hop_slots(fusion_in, s.fusion) else fusion_in.shape
        results = [
            build_result(
                rank,
                f,
                [records[c] for c in (f.chunk_id, *f.merged) if c in records],
                stale,
                explain,
                s.search.max_text_chars,
                trust,
                hidden,
                places([records[c] for c in f.duplicates if c in records]),
                more=tuple(
                    copy_of(records[c]) for c in f.capped if c in records and c not in listed
                ),
                score=score,
                one_hop=one_hop,
            )
            for rank, ((f, stale, records), score) in enumerate(
                zip(shown, monotone_scores([f.score for f, _stale, _recs in shown])), start=1
            )
        ]
        withheld = None
        if min_confidence is not None and results and confidence < min_confidence:
            withheld = (
                f"confidence {confidence:.4f} is below min_confidence {min_confidence:g}: "
                f"{len(results)} result{'' if len(results) == 1 else 's'} withheld"
            )
            results = []
        timings["total_ms"] = round((time.perf_counter() - t_start) * 1000, 3)
        return SearchResponse(
            query=query,
            results=tuple(results),
            timings=timings,
            paths=names,
            degraded=bool(reasons),
            reasons=reasons,
            usage=_with_remote(ran.usage, meter),
            stages=ran.stages,
            trust=trust_summary(trust, signals=not hidden),
            stale_hidden=len(hidden_stale),
            stale_hidden_ids=tuple(hidden_stale),
            confidence=confidence,
            no_good_match=match < s.search.no_match_below,
            withheld=withheld,
        )

    def run_paths(
        self, names: Sequence[str], query: str, *, limit: int, filters: Filters
    ) -> PathRuns:
        """:meth:`HybridSearch.run_paths <hybridsag.search.HybridSearch.run_paths>`."""
        futures: dict[str, Future[tuple[PathResult, float]]] = {}
        # the joined paths are submitted first: a pool task that only waits on tasks submitted
        # before it cannot deadlock, whatever the pool size or the searches running
        for name in _joined_first(names):
            peers = {
                other: partial(_hits_of, futures[other])
                for other in path_spec(name).joins
                if other in futures
            }
            futures[name] = submit(self._pool, self._timed_path, name, query, limit, filters, peers)
        out = PathRuns()
        for name in names:
            try:
                result, ms = futures[name].result()
            except Exception as exc:  # noqa: BLE001 - a failing path never kills the search
                if isinstance(exc, QueryError):
                    raise
                if (
                    isinstance(exc, JudgeError)
                    and not isinstance(exc, BudgetError)
                    and self.settings.judge.on_failure == "raise"
                ):
                    raise
                out.reasons[name] = _path_failure(name, exc)
                continue
            out.runs[name] = list(result.hits)
            out.timings[f"{name}_ms"] = ms
            if result.timings:
                out.stages[name] = dict(result.timings)
            if result.usage:
                out.usage[name] = dict(result.usage)
            if result.degraded:
                out.reasons[name] = result.degraded
        return out

    def visible_chunks(
        self, runs: Mapping[str, Sequence[Hit]], filters: Filters
    ) -> dict[str, ChunkView]:
        """:meth:`HybridSearch.visible_chunks <hybridsag.search.HybridSearch.visible_chunks>`."""
        depth = self.settings.fusion.depth
        ids = dict.fromkeys(h.chunk_id for hits in runs.values() for h in hits if h.rank <= depth)
        return self.components.store.chunk_views(ids, filters)

    def fusion_input(
        self, names: Sequence[str], query: str, ran: PathRuns, filters: Filters, *, facts: bool
    ) -> FusionInput:
        """:meth:`HybridSearch.fusion_input <hybridsag.search.HybridSearch.fusion_input>`."""
        views = self.visible_chunks(ran.runs, filters)
        measured: QueryFacts | None = None
        if facts:
            t0 = time.perf_counter()
            dense = any(PATHS[n].kind == "embedding" for n in ran.runs)
            measured = query_facts(self.components, query, dense=dense, filters=filters)
            ran.timings["trust_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        # a tenant's search shows no score that depends on the whole index (other tenants'
        # documents included): ranks and RRF terms only for those paths, fused by rank
        scoped = filters.tenant is not None
        hidden = frozenset(n for n in names if scoped and PATHS[n].corpus_scores)
        shape = next(
            (
                str(ran.usage[n]["shape"])
                for n in ran.runs
                if PATHS[n].kind == "judged" and "shape" in ran.usage.get(n, {})
            ),
            None,
        )
        return FusionInput(query, ran.runs, views, measured, hidden, shape)

    def _shown(
        self,
        ruled: list[FusedHit],
        top_k: int,
        filters: Filters,
        fuse_more: Callable[..., tuple[list[FusedHit], Trust | None]],
        window: int,
    ) -> Iterator[tuple[FusedHit, ChunkRecord, dict[str, ResourceRecord], dict[str, ChunkRecord]]]:
        """The fused hits ``ruled`` (the first ``window`` of the fusion, or all of them when
        fewer) in order, each with its chunk record and the chunk and resource records read
        with it (its copies', its merged neighbours' and its resource's held-back hits' among
        them), read ``top_k`` hits at a time as the response takes
        them. A response that takes more than the window (stale results held back) gets the
        rest from ``fuse_more(limit=None)``, the whole fusion, whose first hits are these. A
        hit whose chunk or resource went away since fusion read its view, or that no longer
        passes ``filters``, is left out."""
        store = self.components.store
        whole = len(ruled) < window
        pos = 0
        while True:
            if pos >= len(ruled):
                if whole:
                    return
                ruled, whole = fuse_more(limit=None)[0], True
                continue
            page = ruled[pos : pos + top_k]
            pos += len(page)
            records = store.chunks(
                c for f in page for c in (f.chunk_id, *f.duplicates, *f.merged, *f.capped)
            )
            resources = store.resources(r.key for r in records.values())
            for f in page:
                rec = records.get(f.chunk_id)
                res = resources.get(rec.key) if rec is not None else None
                if rec is not None and res is not None and filters.allows(res):
                    yield f, rec, resources, records

    def _timed_path(
        self, name: str, query: str, limit: int, flt: Filters, peers: Mapping[str, Any]
    ) -> tuple[PathResult, float]:
        t0 = time.perf_counter()
        retriever = self.components.retriever(name)
        result = retriever.retrieve(query, limit=limit, filters=flt, peers=peers)
        return result, round((time.perf_counter() - t0) * 1000, 3)


def _hits_of(future: Future[tuple[PathResult, float]]) -> list[Hit]:
    """The hits of a path run in the pool, or its error: a :class:`HybridSagError` as it was
    raised, anything else (a path that broke its contract) wrapped in one, so a path that
    joins it only ever sees the error tree (:data:`~hybridsag.paths.base.Peers`)."""
    try:
        return list(future.result()[0].hits)
    except HybridSagError:
        raise
    except Exception as exc:  # noqa: BLE001 - logged with its traceback by run_paths
        raise HybridSagError(f"unexpected {type(exc).__name__}: {exc}") from exc


def _path_failure(name: str, exc: BaseException) -> str:
    """The reason a path is left out of a search, logged once here: a
    :class:`HybridSagError` as a warning, anything else (a bug: a path must raise nothing
    outside the error tree) as an error with its traceback."""
    if isinstance(exc, HybridSagError):
        reason = f"{type(exc).__name__}: {exc}"
        log.warning("path %s left out of the search: %s", name, reason)
    else:
        reason = f"unexpected {type(exc).__name__}: {exc}"
        log.error("path %s left out of the search: %s", name, reason, exc_info=exc)
    return reason


def _with_remote(usage: Mapping[str, Any], meter: QueryMeter) -> Mapping[str, Any]:
    """``usage`` with the meter's ``remote`` (when a remote model was called) and
    ``remote_budget`` (when the search had one); ``usage`` itself when there is neither."""
    remote, budget = meter.usage(), meter.budget()
    if not remote and budget is None:
        return usage
    out = dict(usage)
    if remote:
        out["remote"] = remote
    if budget is not None:
        out["remote_budget"] = budget
    return out


def _joined_first(names: Sequence[str]) -> list[str]:
    """``names`` ordered so that each path comes after the paths it joins (when they run)."""
    wanted = set(names)
    ordered: list[str] = []

    def visit(name: str, seen: frozenset[str]) -> None:
        if name in ordered or name in seen:
            return
        for other in path_spec(name).joins:
            if other in wanted:
                visit(other, seen | {name})
        ordered.append(name)

    for name in names:
        visit(name, frozenset())
    return ordered
