"""The steps of a search after its paths ran, which every offline run calls too
(:mod:`hybridsag.evaluation.offline_runs`, ``scripts/fit_confidence.py``), so that what they score
is what a search returns: what the paths gave (:class:`PathRuns`), what fusion reads
(:class:`FusionInput`), the fusion step (:func:`fuse_step`) and the confidence step
(:func:`confidence_step`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from hybridsag.fusion import ChunkView, FusedHit, Hit, QueryFacts, Trust, TrustModel, assess, fuse
from hybridsag.fusion.confidence import ConfidenceModel, confidence_features, coverage
from hybridsag.lexical.tokenizer import Tokenizer
from hybridsag.paths import path_kinds
from hybridsag.paths.evidence import reads_multi_hop
from hybridsag.settings import FusionSettings

__all__ = [
    "FusionInput",
    "PathRuns",
    "confidence_step",
    "fuse_step",
    "judge_floor",
    "next_hop_slots",
]


@dataclass
class PathRuns:
    """What :meth:`HybridSearch.run_paths` gives fusion: each path's hits, wall time (ms),
    stage timings, usage, and the reason of each path that failed or degraded."""

    runs: dict[str, list[Hit]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FusionInput:
    """What the fusion step reads of one query (:meth:`HybridSearch.fusion_input`): the
    validated query, each path's hits, the chunks fusion may see, the trust step's query facts
    (``None`` when it was not asked for), the paths whose corpus-wide scores a
    tenant-scoped search hides, and the question's shape as the judged path's evidence
    selection read it (its ``usage["shape"]``: ``"open"``, ``"entity+bridge"``,
    ``"comparison"``, ...; ``None`` when no judged path ran or it selected no evidence), from
    which :func:`fuse_step` decides the next-hop slots
    (:func:`~hybridsag.paths.evidence.reads_multi_hop`)."""

    query: str
    runs: Mapping[str, Sequence[Hit]]
    views: Mapping[str, ChunkView]
    facts: QueryFacts | None = None
    hidden: frozenset[str] = frozenset()
    shape: str | None = None

    def __setstate__(self, state: Sequence[Any]) -> None:
        # a capture pickled before a field was added (hybridsag.evaluation.tuning caches them)
        # holds fewer values: the fields it lacks take their defaults
        values = dict(zip((f.name for f in fields(self)), state))
        for f in fields(self):
            object.__setattr__(self, f.name, values.get(f.name, f.default))


def fuse_step(
    fusion_in: FusionInput,
    fusion: FusionSettings,
    model: TrustModel,
    *,
    weights: Mapping[str, float] | None = None,
    judge_order: bool | None = None,
    limit: int | None = None,
) -> tuple[list[FusedHit], Trust | None]:
    """The fusion step of a search, which every offline run calls too
    (:mod:`hybridsag.evaluation.offline_runs`), so that what they score is what a search returns: with
    ``fusion.trust`` on, :func:`hybridsag.fusion.assess` under ``model`` weighs the paths from
    ``weights`` (default ``fusion.weights``); then :func:`hybridsag.fusion.fuse` with
    ``fusion``'s options (``judge_order`` overrides its own), by rank (RRF) when a path's
    scores are hidden, and only its first ``limit`` hits (``None``: all); with
    ``fusion.next_hop_slots = "multi-hop"`` the next-hop slots hold only for a question
    ``fusion_in.shape`` reads as multi-hop (:func:`~hybridsag.paths.evidence.reads_multi_hop`).
    Returns the ruled hits and the trust decision (``None`` with the step off). ValueError: the
    step is on and ``fusion_in.facts`` is ``None``, or a bad option."""
    chosen = fusion.weights if weights is None else weights
    trust = None
    if fusion.trust:
        if fusion_in.facts is None:
            raise ValueError("the trust step is on but the fusion input carries no query facts")
        kinds = path_kinds(list(fusion_in.runs))
        trust = assess(fusion_in.runs, kinds, fusion_in.facts, weights=chosen, model=model)
    options = fusion.options(weights=chosen, judge_order=judge_order)
    options["judge_floor"] = judge_floor(fusion_in, fusion)
    if fusion_in.hidden:
        options["method"] = "rrf"
    fused = fuse(
        fusion_in.runs,
        query=fusion_in.query,
        chunks=fusion_in.views,
        trust=trust,
        next_hop=next_hop_slots(fusion_in, fusion),
        limit=limit,
        **options,
    )
    return fused, trust


def judge_floor(fusion_in: FusionInput, fusion: FusionSettings) -> float:
    """The judge probability below which ``judge_order`` never lifts a hit for this query:
    ``fusion.judge_order_floor`` for a question the judged path's evidence selection read as
    one-hop or did not read, 0 for one it read as multi-hop
    (:func:`~hybridsag.paths.evidence.reads_multi_hop` of a known ``fusion_in.shape``). In a
    multi-hop question the selection places a bridge passage for the link another selected
    passage opens, which the judge, asked about the question alone, scores low (on 2wiki gold
    bridges at 0.007 are taken at #2 of the judge's order): there the order is the selection's,
    not a rejection the floor should keep down. In a one-hop question a low probability is the
    judge's no (issue 38: docs chunks scored 0.003 lifted into the top 5)."""
    known_multi_hop = fusion_in.shape is not None and reads_multi_hop(fusion_in.shape)
    return 0.0 if known_multi_hop else fusion.judge_order_floor


def next_hop_slots(fusion_in: FusionInput, fusion: FusionSettings) -> bool:
    """Whether the next-hop slots may hold for this query: always with
    ``fusion.next_hop_slots = "always"``, else when the judged path's evidence selection read
    the question as multi-hop, or read nothing (:func:`~hybridsag.paths.evidence.reads_multi_hop`
    of ``fusion_in.shape``)."""
    return fusion.next_hop_slots == "always" or reads_multi_hop(fusion_in.shape)


def confidence_step(
    fusion_in: FusionInput,
    fused: Sequence[FusedHit],
    trust: Trust | None,
    fusion: FusionSettings,
    tokenizer: Tokenizer,
    model: ConfidenceModel,
) -> tuple[float | None, dict[str, float] | None]:
    """The confidence of a response (:mod:`hybridsag.fusion.confidence`), which the fit
    (``scripts/fit_confidence.py``) computes the same way from captured runs: the features of
    the fused hits ``fused`` (in their shown order) and the ``trust`` decision that
    :func:`fuse_step` made for ``fusion_in`` under ``fusion``, the query's terms as the
    lexical index searched them (the query facts' ``searched_terms``: a misspelt word
    respelled; without facts ``tokenizer``'s
    :meth:`~hybridsag.lexical.tokenizer.Tokenizer.query_terms`) looked up among the top
    result's title, heading and text tokens; then ``model``'s probability, rounded to 4
    places. Returns ``(confidence, features)``, ``(None, None)`` for no result. No model is
    called: everything read was computed by the paths and the trust step."""
    if not fused:
        return None, None
    view = fusion_in.views.get(fused[0].chunk_id)
    facts = fusion_in.facts
    # the terms as the index was searched for them (a misspelt word respelled) when measured
    terms = (
        list(facts.searched_terms)
        if facts is not None and facts.searched_terms
        else tokenizer.query_terms(fusion_in.query)
    )
    found = (
        tokenizer.tokenize(f"{view.title}\n{view.heading_path}\n{view.text}")
        if view is not None
        else ()
    )
    features = confidence_features(
        fusion_in.query,
        fused,
        fusion_in.runs,
        path_kinds(list(fusion_in.runs)),
        fusion_in.views,
        facts=fusion_in.facts,
        trust=trust,
        term_coverage=coverage(terms, found),
        by_rank=fusion.method == "rrf" or bool(fusion_in.hidden),
    )
    if features is None:
        return None, None
    return round(model.predict(features), 4), features
