"""One engine for offline runs: each question's paths run once, and any fusion setting is scored
over those runs with the search's own fusion step.

Tuning (``eval --tune-weights``), the grid (``eval --grid``), the fused arms of ``eval
--compare`` and the fitting captures (:mod:`hybridsag.evaluation.tuning`, ``benchmarks/fusion_loso.py``)
ask what a search with some fusion setting returns. :func:`capture` runs the paths once per
question as a search runs them and keeps what the fusion step reads
(:meth:`~hybridsag.search.HybridSearch.fusion_input`); what the runs depend on (paths, SAG2
rounds, judge, ``fusion.depth``) is the capture's, so a sweep over rounds captures once per
value (:class:`Captures`). :func:`fused` and :func:`score` fuse through
:func:`hybridsag.search.fuse_step`, trust step included: a question gets the ranked chunks and
fused scores ``HybridSearch.search`` returns with that setting. A grid declares its fusion
method (:func:`grid`), and a parameter the method does not read (:data:`METHOD_ONLY`: ``k``
for convex, ``normalisation`` for rrf) is refused naming the method, never swept.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybridsag.errors import InputError
from hybridsag.fusion import METHODS, NORMALISERS, FusedHit, TrustModel
from hybridsag.evaluation.measures import NAMES, metrics_for, ranked_results
from hybridsag.paths import check_weights
from hybridsag.paths.query import validate_query
from hybridsag.search import FusionInput, HybridSearch, fuse_step
from hybridsag.settings import FusionSettings, Settings
from hybridsag.records.filters import Filters
from hybridsag.paths.query_facts import load_trust_model

__all__ = [
    "DEPTH",
    "GRID_KS",
    "GRID_WEIGHTS",
    "METHOD_ONLY",
    "Capture",
    "CapturedQuestion",
    "Captures",
    "Scored",
    "capture",
    "check_method",
    "describe",
    "fused",
    "fusion_variant",
    "grid",
    "relative_weights",
    "score",
]

#: Results kept per question (eval scores the top 10, what ``search(top_k=10)`` returns).
DEPTH = 10
#: The weights a grid tries per path by default (relative: the largest of a point is 1).
GRID_WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
#: The RRF constants an rrf grid tries by default.
GRID_KS = (10.0, 30.0, 60.0, 100.0)
#: The fusion parameters one method alone reads (both read every other fusion setting).
METHOD_ONLY = {"k": "rrf", "normalisation": "convex"}

Question = tuple[str, str, frozenset[str]]  # (question id, text, gold resource ids)


def check_method(method: str, given: Iterable[str], *, where: str) -> None:
    """InputError for an unknown fusion ``method``, or a parameter in ``given`` it does not
    read (the message names the method)."""
    if method not in METHODS:
        raise InputError(f"{where}: unknown fusion method {method!r}; valid: {', '.join(METHODS)}")
    for name in given:
        owner = METHOD_ONLY.get(name, method)
        if owner != method:
            raise InputError(
                f"{where}: {name} is read by {owner} fusion only, and the fusion method here is "
                f"{method}, which ignores it (every {name} would score the same): choose the "
                f"{owner} method or leave {name} out"
            )


def fusion_variant(base: FusionSettings, **changes: Any) -> FusionSettings:
    """``base`` with ``changes``, validated as settings are (InputError names a bad value)."""
    try:
        return FusionSettings.model_validate({**base.model_dump(), **changes})
    except ValueError as exc:
        raise InputError(f"fusion setting {changes}: {exc}") from None


def describe(fusion: FusionSettings) -> dict[str, Any]:
    """A fusion setting as a grid row names it: the method, the method's own parameter (k or
    normalisation), the weights and ``judge_order``."""
    own = "k" if fusion.method == "rrf" else "normalisation"
    return {"method": fusion.method, own: getattr(fusion, own), "weights": dict(fusion.weights),
            "judge_order": fusion.judge_order}  # fmt: skip


def relative_weights(paths: Sequence[str], values: Sequence[float]) -> list[dict[str, float]]:
    """Every assignment of ``values`` to ``paths`` whose largest weight is 1 (the scale of all
    the weights moves neither method's order), in product order."""
    combos = itertools.product(values, repeat=len(paths))
    return [dict(zip(paths, c)) for c in combos if max(c) == 1.0]


def grid(
    base: FusionSettings,
    method: str,
    weights: Sequence[Mapping[str, float]],
    *,
    ks: Sequence[float] = (),
    normalisations: Sequence[str] = (),
    judge_orders: Sequence[bool] = (),
) -> list[FusionSettings]:
    """The fusion settings of a grid of one declared ``method``: ``base`` with every
    combination of ``weights``, ``ks`` (rrf only), ``normalisations`` (convex only) and
    ``judge_orders``; an empty axis keeps ``base``'s value. InputError, naming the method, for
    an axis the method does not read; InputError for no weights or a bad value."""
    check_method(method, [n for n, a in (("k", ks), ("normalisation", normalisations)) if a],
                 where="the grid")  # fmt: skip
    if bad := set(normalisations) - set(NORMALISERS):
        raise InputError(f"unknown normalisation {sorted(bad)}; valid: {', '.join(NORMALISERS)}")
    if not weights:
        raise InputError("the grid has no weights to try (weights are relative: include 1)")
    axes = [[("weights", dict(w)) for w in weights]]
    others = (("k", ks), ("normalisation", normalisations), ("judge_order", judge_orders))
    axes += [[(name, v) for v in values] for name, values in others if values]
    return [fusion_variant(base, method=method, **dict(p)) for p in itertools.product(*axes)]


@dataclass(frozen=True, slots=True)
class CapturedQuestion:
    """One question's runs as the fusion step reads them, its gold resource ids, and the ms its
    paths and fusion input took (what a search spends before it fuses)."""

    qid: str
    gold: frozenset[str]
    fusion_in: FusionInput
    ms: float


@dataclass(frozen=True, slots=True)
class Capture:
    """The runs of ``paths`` (as resolved) for every question."""

    paths: tuple[str, ...]
    questions: tuple[CapturedQuestion, ...]


def capture(
    hs: HybridSearch,
    questions: Iterable[Question],
    paths: Sequence[str] | None = None,
    *,
    progress: Callable[[int], None] | None = None,
    on_question: Callable[[str, FusionInput], FusionInput] | None = None,
) -> Capture:
    """Run ``paths`` (resolved as a search resolves them) once per question, as
    ``hs.search(text, top_k=DEPTH, paths=paths)`` runs them, and keep what the fusion step
    reads; ``on_question(qid, fusion_in)`` may add to it (:mod:`hybridsag.evaluation.tuning` adds the
    SAG2 pool's chunks). QueryError for an unknown path or a question a search refuses."""
    names = hs.resolve_paths(paths)
    s, flt = hs.settings, Filters()
    out = []
    for qid, text, gold in questions:
        t0 = time.perf_counter()
        query = validate_query(text, max_chars=s.query.max_chars)
        ran = hs.run_paths(names, query, limit=max(s.fusion.depth, DEPTH), filters=flt)
        fusion_in = hs.fusion_input(names, query, ran, flt, facts=True)
        ms = (time.perf_counter() - t0) * 1000.0
        if on_question is not None:
            fusion_in = on_question(qid, fusion_in)
        out.append(CapturedQuestion(qid, gold, fusion_in, ms))
        if progress is not None:
            progress(1)
    return Capture(names, tuple(out))


class Captures:
    """Captures of one question set over the open index ``base`` searches, one per run-level
    settings (:meth:`get`), each under a HybridSearch that shares ``base``'s embedder and dense
    index; :meth:`close` closes them and ``base``."""

    def __init__(self, base: HybridSearch, questions: Sequence[Question]) -> None:
        self.base, self.questions = base, questions
        self._searches: dict[str, HybridSearch] = {}
        self._captures: dict[str, Capture] = {}

    def search_for(self, settings: Settings) -> HybridSearch:
        """A HybridSearch with ``settings`` over the shared index."""
        if settings == self.base.settings:
            return self.base
        key = repr(settings.model_dump(mode="json"))
        if key not in self._searches:
            parts = self.base.components
            shared = (
                {"embedder": parts.embedder(), "dense_index": parts.dense_index()}
                if parts.dense_enabled
                else {}
            )
            self._searches[key] = HybridSearch(settings, **shared)
        return self._searches[key]

    def get(
        self,
        settings: Settings,
        paths: Sequence[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> Capture:
        """The capture of ``paths`` under ``settings``, made on first use: two settings share
        one when they differ in ``fusion`` alone, but for ``fusion.depth`` (the ranks each
        path returns)."""
        data = settings.model_dump(mode="json")
        data["fusion"] = {"depth": settings.fusion.depth}
        key = repr((tuple(paths or ()), sorted(data.items())))
        if key not in self._captures:
            hs = self.search_for(settings)
            self._captures[key] = capture(hs, self.questions, paths, progress=progress)
        elif progress is not None:
            progress(len(self.questions))
        return self._captures[key]

    def close(self) -> None:
        for hs in self._searches.values():
            hs.close()
        self.base.close()


def fused(
    fusion_in: FusionInput,
    fusion: FusionSettings,
    *,
    weights: Mapping[str, float] | None = None,
    judge_order: bool | None = None,
    model: TrustModel | None = None,
) -> list[FusedHit]:
    """The first :data:`DEPTH` fused hits a search with ``fusion`` (and its per-call
    ``weights`` and ``judge_order``) returns for a captured question, under the trust
    ``model`` (default ``fusion.trust_model``'s)."""
    model = load_trust_model(fusion.trust_model) if model is None else model
    return fuse_step(fusion_in, fusion, model, weights=weights, judge_order=judge_order)[0][:DEPTH]


@dataclass(frozen=True, slots=True)
class Scored:
    """A setting scored on a capture: per question the resource ids it ranks (each once),
    their metrics (:func:`hybridsag.evaluation.measures.metrics_for`) and its fusion ms; the means."""

    fusion: FusionSettings
    ranked: Mapping[str, list[str]]
    per_query: Mapping[str, Mapping[str, float]]
    fuse_ms: Mapping[str, float]
    metrics: Mapping[str, float]


def score(
    cap: Capture,
    fusion: FusionSettings,
    *,
    weights: Mapping[str, float] | None = None,
    judge_order: bool | None = None,
) -> Scored:
    """``fusion`` (with a search's per-call ``weights`` and ``judge_order``) on every captured
    question (:func:`fused`). InputError names a bad weight."""
    if weights is not None:
        try:
            weights = check_weights(weights)
        except ValueError as exc:
            raise InputError(str(exc)) from None
    model = load_trust_model(fusion.trust_model)
    ranked, per_query, spent = {}, {}, {}
    for q in cap.questions:
        t0 = time.perf_counter()
        hits = fused(q.fusion_in, fusion, weights=weights, judge_order=judge_order, model=model)
        spent[q.qid] = (time.perf_counter() - t0) * 1000.0
        views = q.fusion_in.views
        # a hit stands for the neighbours merged into it and its copies (FusedHit.merged,
        # .duplicates), as a search's result for its merged chunks and also_in
        ranked[q.qid] = ranked_results(
            [[views[c].resource_id for c in (h.chunk_id, *h.merged, *h.duplicates)] for h in hits],
            q.gold,
        )
        per_query[q.qid] = metrics_for(ranked[q.qid], q.gold)
    n = max(len(per_query), 1)
    means = {k: sum(m[k] for m in per_query.values()) / n for k in NAMES}
    return Scored(fusion, ranked, per_query, spent, means)
