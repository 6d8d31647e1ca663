"""Per-query trust between recall paths, from signals that need no labels.

A hybrid search must never make a team's results worse than the single path it already had. No
one path wins everywhere: the judged lexical path (SAG2) leads on multi-hop and keyword-rich
questions, the embedding path on descriptive questions whose words differ from the passage's
(code searched in plain English, an entity looked up by a description), plain BM25 on
single-hop lookups in a language the embedding model cannot read (where the judge loses its
dense evidence and its next-hop finds are noise), and an embedding model reads nothing of a
language it was not trained on. So, per query, :func:`assess` weighs the evidence each path
brings and returns a :class:`Trust`: the fusion weight of every path and whether the judge's
order should hold over what it scored.

Signals (all label-free, all plain numbers; the names are the keys of :attr:`Trust.signals`):

- from the paths' own hits (:func:`list_stats`): the embedding path's top score standardised
  against its own list (``dense_z``: the query-performance-prediction idea of a clear winner
  standing out of the score distribution, as in normalised query commitment) and its margin
  over the runner-up (``dense_margin``); the same z for the plain lexical path
  (``lexical_z``); the judge's top probability (``judge_top``), its margin (``judge_margin``),
  the share of its top ten it accepted (``judge_yes``) and the share of its top ten found by a
  next-hop query (``judge_next_hop``);
- agreement: the share of the embedding path's top ten (``agreement``) and of the lexical
  path's top ten (``lexical_agreement``) that the judged path also ranks in its top ten;
- how weak the lexical evidence is and where the embedding path's finds come from: the
  lexical path's tenth score over its first (``lexical_flat``, 1 for a flat list: a keyword
  list of common words that many passages match about equally, where BM25's order says
  little), the judge's mean probability over its top ten (``judge_mean``, low across the pool
  when no candidate answers), and the share of the embedding path's top ten that the lexical
  path also finds in its list (``dense_support``, low when the embedding path's finds are
  passages no query term leads to: among many near-duplicate distractors, or a description
  whose words the passage lacks);
- from the caller (:class:`QueryFacts`, measured against the index and the embedder): the share
  of the query's letters the embedding model reads as words (``reads``), the share of the
  query's terms the lexical index holds (``terms_in_index``) and their mean normalised IDF
  (``idf``), and the question's shape: its share of capitalised words (``capitalised``, entity
  names) and its length (``words``, log-scaled).

Two logistic models over these (:class:`TrustModel`, fitted offline on several labelled sets,
see ``benchmarks/fusion_loso.py``) give ``dense_share``, the probability that the embedding
path's order beats the judge's for this query, multiplied by ``reads`` (a model that cannot read
the query gets no share), and ``lexical_share``, the probability that plain BM25's does. The
embedding path then weighs ``2 * dense_share``, the lexical path ``2 * (1 - dense_share) *
lexical_share`` and the judged path ``2 * (1 - dense_share) * (1 - lexical_share)`` times
their configured weights (the title path keeps its own), and the judge's order holds while
both shares stay below ``judge_hold_below``.

Paths are told apart by the kind the caller gives each name (``kinds``: ``"judged"``,
``"embedding"``, ``"lexical"``, ``"title"``), never by their names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hybridsag.fusion.types import Hit

__all__ = [
    "DEFAULT_TRUST_MODEL",
    "KINDS",
    "SIGNAL_NAMES",
    "QueryFacts",
    "Trust",
    "TrustModel",
    "assess",
    "flatness",
    "list_stats",
    "trust_signals",
]

#: What a path is, as far as trust is concerned.
KINDS = ("judged", "embedding", "lexical", "title")

#: The signals :func:`trust_signals` computes, in the order a :class:`TrustModel` reads them.
SIGNAL_NAMES: tuple[str, ...] = (
    "dense_z",
    "dense_margin",
    "judge_top",
    "judge_margin",
    "judge_yes",
    "agreement",
    "lexical_z",
    "lexical_agreement",
    "judge_next_hop",
    "reads",
    "terms_in_index",
    "idf",
    "capitalised",
    "words",
    "lexical_flat",
    "judge_mean",
    "dense_support",
)


@dataclass(frozen=True, slots=True)
class QueryFacts:
    """What the caller measured of a query outside the paths' hits (plain numbers; see
    ``hybridsag.paths.query_facts.query_facts``): the share of its letters the embedding model reads as
    words (``None``: unknown), its lexical terms, the share of them in the index, their mean
    normalised IDF, its length in words, and the share of its words that are capitalised.
    ``searched_terms``: the lexical terms as the index was searched for them (a misspelt word
    respelled, :meth:`~hybridsag.lexical.contract.LexicalIndex.query_terms`; empty when not
    measured), which the confidence's term coverage reads."""

    embedder_reads: float | None = None
    terms: int = 0
    terms_in_index: float = 1.0
    idf: float = 0.0
    words: int = 0
    capitalised: float = 0.0
    searched_terms: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TrustModel:
    """Two logistic models: "the embedding path's order is the better one for this query" and
    "the plain lexical path's order beats the judged path's".

    ``coefficients`` map names of :data:`SIGNAL_NAMES` to weights (a missing name weighs 0);
    ``dense_share = sigmoid(bias + sum(coef * signal)) * reads``, clamped to
    ``[floor, ceiling]``; ``lexical_share = sigmoid(lexical_bias + sum(lexical_coef *
    signal))`` (the default bias of -50 keeps it at 0). ``judge_hold_below``: the judge's order
    holds while both shares stay below it. ``source`` says where the numbers came from.
    ``judge_unsure_below``: a judge whose top probability stays below it said no to everything
    it scored, so its order does not hold and the embedding path's share is at least
    ``unsure_dense_share * reads`` (0, the default, switches this off)."""

    coefficients: Mapping[str, float]
    bias: float
    floor: float = 0.0
    ceiling: float = 1.0
    judge_hold_below: float = 0.5
    source: str = "hand-set"
    judge_unsure_below: float = 0.0
    unsure_dense_share: float = 0.0
    lexical_coefficients: Mapping[str, float] = field(default_factory=dict)
    lexical_bias: float = -50.0

    def __post_init__(self) -> None:
        unknown = (set(self.coefficients) | set(self.lexical_coefficients)) - set(SIGNAL_NAMES)
        if unknown:
            raise ValueError(
                f"unknown trust signals {sorted(unknown)}; valid: {', '.join(SIGNAL_NAMES)}"
            )
        for name, value in (
            *self.coefficients.items(),
            *self.lexical_coefficients.items(),
            ("bias", self.bias),
            ("lexical_bias", self.lexical_bias),
        ):
            if not math.isfinite(value):
                raise ValueError(f"trust coefficient {name!r} must be finite, got {value!r}")
        for name in ("judge_unsure_below", "unsure_dense_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"trust {name} must be in [0, 1], got {value!r}")
        if not 0.0 <= self.floor <= self.ceiling <= 1.0:
            raise ValueError(
                f"trust floor/ceiling must satisfy 0 <= floor <= ceiling <= 1, got "
                f"{self.floor!r}, {self.ceiling!r}"
            )


#: The shipped model: fitted by ``benchmarks/fusion_loso.py --write-model`` on the captured runs
#: of musique100, pycode, cmrc2018 (first 500 questions), manpages-en and manpages-ru with the
#: shipped judge (never on 2wiki); ``judge_hold_below`` 0.7 is the leave-one-set-out choice
#: (benchmarks/results/fusion_loso.md).
DEFAULT_TRUST_MODEL = TrustModel(
    coefficients={
        "dense_z": 0.2886,
        "dense_margin": 0.4703,
        "judge_top": 0.2241,
        "judge_margin": -1.5768,
        "judge_yes": 0.4025,
        "agreement": 2.4443,
        "lexical_z": -0.3302,
        "lexical_agreement": 0.2307,
        "judge_next_hop": 0.086,
        "terms_in_index": -0.0457,
        "idf": -1.2289,
        "capitalised": 0.0325,
        "words": -0.0269,
    },
    bias=-1.6034,
    lexical_coefficients={
        "dense_z": 0.0588,
        "dense_margin": -0.6327,
        "judge_top": 1.1742,
        "judge_margin": -0.6825,
        "judge_yes": 0.2343,
        "agreement": 0.4822,
        "lexical_z": -0.0372,
        "lexical_agreement": 0.3218,
        "judge_next_hop": 0.5427,
        "reads": -0.8383,
        "terms_in_index": -1.7977,
        "idf": -1.1912,
        "capitalised": -0.1502,
        "words": -0.4868,
    },
    lexical_bias=1.9101,
    judge_hold_below=0.7,
    source="fitted on musique100, pycode, cmrc2018, manpages-en, manpages-ru",
    # chosen on benchmarks/devsets/entity-2wiki (issue 27 item 1), checked on the other sets
    # (docs/benchmarks.md, "Trust on entity, code-question and distractor sets")
    judge_unsure_below=0.1,
    unsure_dense_share=0.6,
)


@dataclass(frozen=True, slots=True)
class Trust:
    """The trust step's decision for one query: every path's fusion weight, whether the
    judge's order holds, the embedding path's share, the signal values it was read from, and
    one line per path saying why (for a result's ``why``)."""

    weights: Mapping[str, float]
    judge_holds: bool
    dense_share: float
    signals: Mapping[str, float] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)


def list_stats(hits: Sequence[Hit], *, top: int = 100) -> tuple[float, float, float]:
    """``(top score, margin to the runner-up, top score's z-score)`` over a path's first
    ``top`` hits by rank (``Hit.score``); zeros for an empty list, margin and z 0 for one hit
    or a list whose scores do not vary."""
    scores = [h.score for h in sorted(hits, key=lambda h: h.rank)[:top]]
    if not scores:
        return 0.0, 0.0, 0.0
    first = scores[0]
    margin = first - scores[1] if len(scores) > 1 else 0.0
    mean = math.fsum(scores) / len(scores)
    var = math.fsum((s - mean) ** 2 for s in scores) / len(scores)
    z = (first - mean) / math.sqrt(var) if var > 1e-18 else 0.0
    return first, margin, z


def flatness(hits: Sequence[Hit], *, at: int = 10) -> float:
    """A path's ``at``-th score over its first (by rank; the last one's when the list is
    shorter), in ``[0, 1]``: 1 when the list is flat (its order says little), near 0 when its
    first hit stands out; 0 for an empty list or a first score that is not positive (a score
    whose ratio means nothing)."""
    scores = [h.score for h in sorted(hits, key=lambda h: h.rank)[:at]]
    if not scores or scores[0] <= 0.0:
        return 0.0
    return min(1.0, max(0.0, scores[-1] / scores[0]))


def _top_ids(hits: Sequence[Hit], k: int) -> list[str]:
    return [h.chunk_id for h in sorted(hits, key=lambda h: h.rank)[:k]]


def trust_signals(
    runs: Mapping[str, Sequence[Hit]],
    kinds: Mapping[str, str],
    facts: QueryFacts,
) -> dict[str, float]:
    """The values of :data:`SIGNAL_NAMES` for one query (see the module docstring). A path
    kind that did not run gives zeros for its signals; ``agreement`` is 0 unless both the
    embedding and the judged path ran; ``reads`` is 1.0 when the facts do not know it."""
    dense = [h for p, hits in runs.items() if kinds.get(p) == "embedding" for h in hits]
    judged = [h for p, hits in runs.items() if kinds.get(p) == "judged" for h in hits]
    _top, d_margin, d_z = list_stats(dense)
    probs = sorted(
        (h.judge_p for h in judged if h.judge_p is not None), reverse=True
    )
    j_top = probs[0] if probs else 0.0
    j_margin = probs[0] - probs[1] if len(probs) > 1 else 0.0
    j_yes = sum(p >= 0.5 for p in probs[:10]) / 10.0
    lexical = [h for p, hits in runs.items() if kinds.get(p) == "lexical" for h in hits]
    judged_top = set(_top_ids(judged, 10))
    agreement = lexical_agreement = 0.0
    if dense and judged:
        agreement = len(set(_top_ids(dense, 10)) & judged_top) / 10.0
    if lexical and judged:
        lexical_agreement = len(set(_top_ids(lexical, 10)) & judged_top) / 10.0
    next_hop = sum(h.next_hop for h in sorted(judged, key=lambda h: h.rank)[:10]) / 10.0
    reads = 1.0 if facts.embedder_reads is None else facts.embedder_reads
    judged_probs = [h.judge_p for h in sorted(judged, key=lambda h: h.rank)[:10]]
    known = [p for p in judged_probs if p is not None]
    judge_mean = math.fsum(known) / len(known) if known else 0.0
    dense_support = 0.0
    if dense and lexical:
        lexical_ids = {h.chunk_id for h in lexical}
        top_dense = _top_ids(dense, 10)
        dense_support = sum(c in lexical_ids for c in top_dense) / len(top_dense)
    return {
        "dense_z": d_z,
        "dense_margin": d_margin,
        "judge_top": j_top,
        "judge_margin": j_margin,
        "judge_yes": j_yes,
        "agreement": agreement,
        "lexical_z": list_stats(lexical)[2],
        "lexical_agreement": lexical_agreement,
        "judge_next_hop": next_hop,
        "reads": reads,
        "terms_in_index": facts.terms_in_index,
        "idf": facts.idf,
        "capitalised": facts.capitalised,
        "words": math.log1p(facts.words),
        "lexical_flat": flatness(lexical),
        "judge_mean": judge_mean,
        "dense_support": dense_support,
    }


def assess(
    runs: Mapping[str, Sequence[Hit]],
    kinds: Mapping[str, str],
    facts: QueryFacts,
    *,
    weights: Mapping[str, float],
    model: TrustModel = DEFAULT_TRUST_MODEL,
) -> Trust:
    """Weigh the paths of one query (see the module docstring).

    ``weights`` are the configured per-path weights; the embedding path gets
    ``weights[it] * 2 * dense_share``, a lexical path ``weights[it] * 2 * (1 - dense_share) *
    lexical_share`` and the judged path ``weights[it] * 2 * (1 - dense_share) * (1 -
    lexical_share)`` (so an even split keeps the configured weights); the title path and any
    other keep their own. Without a judged path and an embedding or lexical one among the runs,
    the configured weights are returned as they are and the judge's order holds.

    Example:
        >>> from hybridsag.fusion.types import Hit
        >>> runs = {"sag2": [Hit("a", "sag2", 1, .9, .9, judge_p=.9)],
        ...         "dense": [Hit("b", "dense", 1, .5, .5)]}
        >>> kinds = {"sag2": "judged", "dense": "embedding"}
        >>> t = assess(runs, kinds, QueryFacts(embedder_reads=0.0), weights={})
        >>> t.weights["dense"], t.judge_holds
        (0.0, True)
    """
    signals = trust_signals(runs, kinds, facts)
    dense_paths = [p for p in runs if kinds.get(p) == "embedding"]
    judged_paths = [p for p in runs if kinds.get(p) == "judged"]
    lexical_paths = [p for p in runs if kinds.get(p) == "lexical"]
    out = {p: float(weights.get(p, 1.0)) for p in runs}
    if not judged_paths or not (dense_paths or lexical_paths):
        return Trust(out, True, 0.0, signals, {})
    reads = min(1.0, max(0.0, signals["reads"]))
    share = 0.0
    if dense_paths:
        z = model.bias + math.fsum(
            model.coefficients.get(name, 0.0) * value for name, value in signals.items()
        )
        share = _sigmoid(z) * reads
        share = min(model.ceiling, max(model.floor, share))
    lex_share = 0.0
    if lexical_paths:
        zl = model.lexical_bias + math.fsum(
            model.lexical_coefficients.get(name, 0.0) * value for name, value in signals.items()
        )
        lex_share = _sigmoid(zl)
    holds = share < model.judge_hold_below and lex_share < model.judge_hold_below
    # judge_top is the judge's highest probability (0.0 also when it gave none: not "unsure")
    scored_any = any(h.judge_p is not None for p in judged_paths for h in runs[p])
    unsure = scored_any and signals["judge_top"] < model.judge_unsure_below
    if unsure:
        # a judge that said no to all it scored: its order is no evidence, the embedding's is
        holds = False
        if dense_paths:
            share = min(model.ceiling, max(share, model.unsure_dense_share * reads))
    judged_share = (1.0 - share) * (1.0 - lex_share)
    reasons: dict[str, str] = {}
    for p in dense_paths:
        out[p] = out[p] * 2.0 * share
        reasons[p] = (
            f"embedding path trusted {share:.2f}: reads {signals['reads']:.2f} of the query, "
            f"top z {signals['dense_z']:.2f}, margin {signals['dense_margin']:.3f}, "
            f"agreement with the judge {signals['agreement']:.1f}"
        )
    for p in lexical_paths:
        out[p] = out[p] * 2.0 * (1.0 - share) * lex_share
        reasons[p] = (
            f"lexical path trusted {(1 - share) * lex_share:.2f}: top z "
            f"{signals['lexical_z']:.2f}, agreement with the judge "
            f"{signals['lexical_agreement']:.1f}, {signals['judge_next_hop'] * 10:.0f} of the "
            f"judge's top 10 found by a next-hop query"
        )
    for p in judged_paths:
        out[p] = out[p] * 2.0 * judged_share
        reasons[p] = (
            f"judged path trusted {judged_share:.2f}: judge top {signals['judge_top']:.2f}, "
            f"margin {signals['judge_margin']:.2f}, {signals['judge_yes'] * 10:.0f} of its "
            f"top 10 accepted; its order {'holds' if holds else 'does not hold'}"
            + (f" (no hit reached {model.judge_unsure_below:.2f})" if unsure else "")
        )
    for p in runs:
        reasons.setdefault(p, f"{kinds.get(p, 'other')} path: its configured weight")
    # rounded: a decision, not a measurement; the last float bits of a z-score must not move
    # the weights (a tenant's results may not depend on how another tenant's documents scale
    # the raw scores those signals are computed from)
    return Trust({p: round(w, 6) for p, w in out.items()}, holds, share, signals, reasons)


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)
