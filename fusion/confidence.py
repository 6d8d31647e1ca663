"""How sure a search is that its top result answers the query: a calibrated confidence.

A search always returns its best candidates, even when nothing in the index is about the query (a
Chinese question over English documents, a tenant whose documents say nothing of it): the results
then look as confident as any other. :func:`confidence_features` reads, for one response, what the
search already computed (no model is called again) and :class:`ConfidenceModel` turns it into the
probability that the top result is a gold result: a logistic model, fitted leave-one-set-out over
several labelled sets and "nothing relevant" searches by ``scripts/fit_confidence.py``
(benchmarks/results/confidence_loso.md gives its reliability table).

The features (:data:`FEATURE_NAMES`, each a plain number; a path that did not run gives a neutral
0 and sets its ``*_missing`` indicator, so a bm25-only search is scored by what it has):

- ``judge_p``: the judge's yes-probability of the top result (0 when the judge ran and did not
  score it); ``judge_best``: the best probability it gave anything; ``judge_missing``: no judged
  path ran or it returned nothing;
- ``margin``: the top fused score's lead over the runner-up, relative to the top score (0..1; 1
  for a single result); ``by_rank``: the fusion was by rank (RRF, as every tenant-scoped search
  fuses), where that margin is on another scale;
- ``agreement``: the share of the recall paths that ran (title paths aside) that rank the top
  result in their own top 10; ``title_hit``: a title path ranks it in its top 3;
- ``coverage``: the share of the query's lexical terms found in the top result's title, heading
  and text; ``coverage_missing``: the query has no lexical term;
- ``dense_cos``: the embedding path's cosine of the top result (the cosine of its list's last hit,
  a bound, when the top result is not in its list), and ``dense_best``, its best cosine, both
  times ``reads`` (the share of the query the embedding model reads: a model that cannot read the
  query gives cosines that mean nothing); ``dense_missing``: no embedding path ran;
- ``reads``, ``terms_in_index`` and ``idf``: the query facts the trust step reads
  (:class:`~hybridsag.fusion.trust.QueryFacts`); ``facts_missing``: the search measured none;
- ``script_match``: the query and the top result are written in the same script
  (:func:`~hybridsag.fusion.text.dominant_script`; 1 when either has no dominant script);
- ``dense_share``: the trust step's share for the embedding path (0 when it did not run).

Pure functions over plain values: standard library only, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from hybridsag.fusion.text import dominant_script
from hybridsag.fusion.trust import QueryFacts, Trust
from hybridsag.fusion.types import ChunkView, FusedHit, Hit

__all__ = [
    "FEATURE_NAMES",
    "MONOTONE_FEATURES",
    "ConfidenceModel",
    "confidence_features",
    "coverage",
]

#: The features :func:`confidence_features` computes, in the order a :class:`ConfidenceModel`
#: file lists them.
FEATURE_NAMES: tuple[str, ...] = (
    "judge_p",
    "judge_best",
    "judge_missing",
    "margin",
    "by_rank",
    "agreement",
    "title_hit",
    "coverage",
    "coverage_missing",
    "dense_cos",
    "dense_best",
    "dense_missing",
    "reads",
    "terms_in_index",
    "idf",
    "facts_missing",
    "script_match",
    "dense_share",
)

#: Features whose weight may not be negative: more of them is never less evidence that the top
#: result answers (the fit holds them at 0 or above; a model that weighs one below is refused).
MONOTONE_FEATURES: tuple[str, ...] = ("judge_p", "agreement", "coverage")

#: A path ranks the top result among its own first this many to count as agreeing with it.
AGREE_TOP = 10
#: A title path's rank of the top result that counts as a title hit.
TITLE_TOP = 3


def coverage(query_terms: Collection[str], result_terms: Collection[str]) -> float | None:
    """The share of ``query_terms`` (deduplicated) among ``result_terms``; ``None`` for a query
    with no term.

    >>> coverage(["reset", "token"], {"reset", "the", "password"})
    0.5
    """
    terms = set(query_terms)
    if not terms:
        return None
    held = set(result_terms)
    return sum(t in held for t in terms) / len(terms)


def _ranked(hits: Sequence[Hit]) -> list[Hit]:
    return sorted(hits, key=lambda h: h.rank)


def confidence_features(
    query: str,
    fused: Sequence[FusedHit],
    runs: Mapping[str, Sequence[Hit]],
    kinds: Mapping[str, str],
    chunks: Mapping[str, ChunkView],
    *,
    facts: QueryFacts | None,
    trust: Trust | None,
    term_coverage: float | None,
    by_rank: bool,
) -> dict[str, float] | None:
    """The values of :data:`FEATURE_NAMES` for one response (see the module docstring), or
    ``None`` when it has no result (there is nothing to be confident in).

    ``fused``: the response's fused hits in their shown order (the first two are read);
    ``runs``: every path's hits; ``kinds``: each path's kind (``"judged"``, ``"embedding"``,
    ``"lexical"``, ``"title"``); ``chunks``: what the search shows of each chunk (the top result's
    text is read for its script); ``facts`` and ``trust``: the trust step's query facts and
    decision (``None`` when it was off); ``term_coverage``: :func:`coverage` of the query's terms
    in the top result (``None``: the query has none); ``by_rank``: fused by rank (RRF).
    """
    if not fused:
        return None
    top = fused[0]
    judged = [h for p, hits in runs.items() if kinds.get(p) == "judged" for h in hits]
    probs = [h.judge_p for h in judged if h.judge_p is not None]
    scored = top.judged
    out: dict[str, float] = {
        "judge_p": (scored.judge_p or 0.0) if scored is not None and probs else 0.0,
        "judge_best": max(probs) if probs else 0.0,
        "judge_missing": 0.0 if probs else 1.0,
    }
    second = fused[1].score if len(fused) > 1 else 0.0
    out["margin"] = (
        min(1.0, max(0.0, (top.score - second) / top.score)) if top.score > 0 else 0.0
    )
    out["by_rank"] = 1.0 if by_rank else 0.0
    recall = [p for p, hits in runs.items() if kinds.get(p) != "title" and hits]
    agree = sum(
        any(h.chunk_id == top.chunk_id for h in _ranked(runs[p])[:AGREE_TOP]) for p in recall
    )
    out["agreement"] = agree / len(recall) if recall else 0.0
    titles = [h for p, hits in runs.items() if kinds.get(p) == "title" for h in hits]
    out["title_hit"] = float(any(h.chunk_id == top.chunk_id and h.rank <= TITLE_TOP
                                 for h in titles))  # fmt: skip
    out["coverage"] = term_coverage if term_coverage is not None else 0.0
    out["coverage_missing"] = 1.0 if term_coverage is None else 0.0
    reads = 1.0 if facts is None or facts.embedder_reads is None else facts.embedder_reads
    reads = min(1.0, max(0.0, reads))
    dense = _ranked([h for p, hits in runs.items() if kinds.get(p) == "embedding" for h in hits])
    if dense:
        own = next((h for h in dense if h.chunk_id == top.chunk_id), dense[-1])
        out["dense_cos"] = _unit(own.score) * reads
        out["dense_best"] = _unit(dense[0].score) * reads
        out["dense_missing"] = 0.0
    else:
        out["dense_cos"] = out["dense_best"] = 0.0
        out["dense_missing"] = 1.0
    out["reads"] = reads
    out["terms_in_index"] = facts.terms_in_index if facts is not None else 0.0
    out["idf"] = facts.idf if facts is not None else 0.0
    out["facts_missing"] = 1.0 if facts is None else 0.0
    view = chunks.get(top.chunk_id)
    asked = dominant_script(query)
    found = dominant_script(f"{view.title}\n{view.text}") if view is not None else None
    out["script_match"] = 0.0 if asked and found and asked != found else 1.0
    out["dense_share"] = trust.dense_share if trust is not None and dense else 0.0
    return out


def _unit(value: float) -> float:
    """A cosine clamped to ``[-1, 1]`` (a non-finite one as 0)."""
    return min(1.0, max(-1.0, value)) if math.isfinite(value) else 0.0


@dataclass(frozen=True, slots=True)
class ConfidenceModel:
    """Two logistic models over :data:`FEATURE_NAMES`, each ``sigmoid(bias + sum(coef *
    feature))``: the **confidence** (``coefficients``, ``bias``), the probability that the top
    result is a gold result, and the **match** (``match_coefficients``, ``match_bias``), the
    probability that the index holds an answer to the query at all, which decides "no good
    match" (below ``no_match_below``).

    They are two questions: a hard multi-hop question whose first hit is the wrong passage of
    the right article has a low confidence but a good match; a question the documents cannot
    answer, over documents of its own topic, has a result that looks as good as many real
    ones. Fitted on the first target alone, the flag misfired on both (issue 38). Without a
    match head (``match_coefficients`` ``None``: a model file of the one-model form) the
    match is the confidence.

    Every coefficient mapping must name every feature and no other (a file fitted on another
    feature list is refused, never read with zeros); the :data:`MONOTONE_FEATURES` weigh 0 or
    more in both.

    Attributes:
        coefficients: the confidence's weight of each feature.
        bias: the confidence's bias.
        no_match_below: the match threshold the fit chose (the ``search.no_match_below``
            default).
        source: where the numbers came from.
        match_coefficients: the match's weight of each feature, or ``None``.
        match_bias: the match's bias.

    Raises:
        ValueError: a missing or unknown feature, a non-finite number, a monotone feature
            weighed below 0, or a threshold outside 0..1 (the message names it).

    >>> m = ConfidenceModel(dict.fromkeys(FEATURE_NAMES, 0.0), bias=0.0)
    >>> m.predict(dict.fromkeys(FEATURE_NAMES, 1.0))
    0.5
    >>> m.predict_match(dict.fromkeys(FEATURE_NAMES, 1.0))  # no match head: the confidence
    0.5
    """

    coefficients: Mapping[str, float]
    bias: float
    no_match_below: float = 0.5
    source: str = "hand-set"
    match_coefficients: Mapping[str, float] | None = None
    match_bias: float = 0.0

    def __post_init__(self) -> None:
        _check_weights("confidence", self.coefficients, self.bias)
        if self.match_coefficients is not None:
            _check_weights("match", self.match_coefficients, self.match_bias)
        if not 0.0 <= self.no_match_below <= 1.0:
            raise ValueError(f"no_match_below must be in 0..1, got {self.no_match_below!r}")

    def predict(self, features: Mapping[str, float]) -> float:
        """The probability (0..1) that the top result is a gold result. ValueError names a
        feature ``features`` lacks."""
        return _logistic(self.coefficients, self.bias, features)

    def predict_match(self, features: Mapping[str, float]) -> float:
        """The probability (0..1) that the index holds an answer to the query (the confidence
        when the model has no match head). ValueError names a feature ``features`` lacks."""
        if self.match_coefficients is None:
            return self.predict(features)
        return _logistic(self.match_coefficients, self.match_bias, features)


def _check_weights(head: str, coefficients: Mapping[str, float], bias: float) -> None:
    """ValueError unless ``coefficients`` weigh exactly :data:`FEATURE_NAMES` with finite
    numbers, the monotone ones 0 or more, and ``bias`` is finite."""
    unknown = set(coefficients) - set(FEATURE_NAMES)
    if unknown:
        raise ValueError(
            f"unknown {head} features {sorted(unknown)}; valid: {', '.join(FEATURE_NAMES)}"
        )
    missing = [n for n in FEATURE_NAMES if n not in coefficients]
    if missing:
        raise ValueError(f"the {head} model gives no weight to the features {missing}")
    for name, value in (*coefficients.items(), ("bias", bias)):
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{head} weight {name!r} must be a finite number, got {value!r}")
    for name in MONOTONE_FEATURES:
        if coefficients[name] < 0:
            raise ValueError(
                f"{head} weight {name!r} is {coefficients[name]!r}: more of it may never "
                f"lower the {head}, so its weight must be 0 or more"
            )


def _logistic(coefficients: Mapping[str, float], bias: float, features: Mapping[str, float]) -> float:
    missing = [n for n in FEATURE_NAMES if n not in features]
    if missing:
        raise ValueError(f"confidence features missing: {missing}")
    z = bias + math.fsum(coefficients[n] * float(features[n]) for n in FEATURE_NAMES)
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)
