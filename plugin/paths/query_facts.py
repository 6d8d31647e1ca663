"""The trust step's query facts read from the index and the embedder (plain numbers for
:mod:`hybridsag.fusion.trust`), and the files of fusion's two fitted models (the trust model,
the response confidence model of :mod:`hybridsag.fusion.confidence`).

Fusion is a pure leaf: what it needs to know of the query beyond the paths' hits (how much of
the query the embedding model can read, how the query's terms stand in the lexical index, the
question's shape) is measured here and handed to it as a :class:`~hybridsag.fusion.QueryFacts`.
"""

from __future__ import annotations

import json
import math
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsag.errors import ConfigError, HybridSagError
from hybridsag.fusion import DEFAULT_TRUST_MODEL, QueryFacts, TrustModel
from hybridsag.fusion.confidence import ConfidenceModel

if TYPE_CHECKING:
    from hybridsag.parts import Parts
    from hybridsag.records.filters import Filters

__all__ = ["CONFIDENCE_WEIGHTS", "load_confidence_model", "load_trust_model", "query_facts"]

#: The confidence model that ships (``scripts/fit_confidence.py --out``): a data file of the
#: ``hybridsag.fusion`` package.
CONFIDENCE_WEIGHTS = "confidence_weights.json"

_CAP_WORD = re.compile(r"(?<![\w.])[A-Z][\w'’\-]*")
_WORD = re.compile(r"\w+")


def query_facts(
    parts: Parts, query: str, *, dense: bool = True, filters: Filters | None = None
) -> QueryFacts:
    """The facts of ``query`` (already validated) that the trust step weighs.

    - ``embedder_reads``: the share of the query's letters the embedding model reads as words
      (:func:`hybridsag.vectors.embedder.vocabulary_share`), ``None`` when the dense side is off or
      the embedder cannot say;
    - ``terms``, ``terms_in_index`` and ``idf``: the query's lexical terms, the share of them
      the index holds, and the mean of their normalised IDF ``log(N/df) / log(N)`` (0..1: 1 for
      a term in one chunk) over the terms it holds; with ``filters`` that name a tenant,
      counted over that tenant's chunks only (so they say nothing of another tenant's);
    - ``words`` and ``capitalised``: the question's length in words and the share of its words
      (after the first) that start with a capital letter (entity names; 0 for scripts without
      case).

    Raises nothing of its own: an embedder that fails here leaves ``embedder_reads`` ``None``
    (the dense path reports its own failure).
    """
    reads: float | None = None
    if dense and parts.dense_enabled:
        from hybridsag.vectors.embedder import vocabulary_share  # here: a lexical search needs no numpy

        try:
            reads = vocabulary_share(parts.embedder(), query)
        except HybridSagError:
            reads = None
    lexical = parts.lexical
    terms = lexical.query_terms(query)
    if filters is not None and filters.tenant is not None:
        dfs, total = lexical.scoped_doc_freqs(terms, filters) if terms else ({}, 0)
        total = max(total, 1)
    else:
        dfs = lexical.doc_freqs(terms) if terms else {}
        total = max(lexical.total_chunks(), 1)
    held = [dfs[t] for t in terms if dfs.get(t)]
    denom = math.log(total) if total > 1 else 1.0
    idf = (
        sum(max(0.0, math.log(total / df)) / denom for df in held) / len(held) if held else 0.0
    )
    words = _WORD.findall(query)
    caps = _CAP_WORD.findall(query)
    first_cap = bool(words) and query.lstrip()[:1].isupper()
    named = max(0, len(caps) - (1 if first_cap else 0))
    return QueryFacts(
        embedder_reads=reads,
        terms=len(terms),
        terms_in_index=len(held) / len(terms) if terms else 0.0,
        idf=round(idf, 6),
        words=len(words),
        capitalised=named / max(len(words) - 1, 1),
        searched_terms=tuple(terms),
    )


def load_trust_model(path: Path | None) -> TrustModel:
    """The trust model of ``fusion.trust_model``: ``None`` gives the one that ships
    (:data:`~hybridsag.fusion.DEFAULT_TRUST_MODEL`), else a JSON file ``{"coefficients":
    {signal: weight}, "bias": b, "lexical_coefficients": {...}?, "lexical_bias": b?,
    "judge_hold_below": t?, "judge_unsure_below": u?, "unsure_dense_share": d?, "floor": f?,
    "ceiling": c?}`` (as benchmarks/fusion_loso.py
    ``--write-model`` writes it).

    Raises:
        ConfigError: the file is missing, is not JSON of that shape, or names an unknown signal
            (the message lists the valid ones).
    """
    if path is None:
        return DEFAULT_TRUST_MODEL
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"fusion.trust_model {p} does not exist")
    try:
        data = json.loads(p.read_text("utf-8"))
        return TrustModel(
            coefficients={str(k): float(v) for k, v in data["coefficients"].items()},
            bias=float(data["bias"]),
            floor=float(data.get("floor", 0.0)),
            ceiling=float(data.get("ceiling", 1.0)),
            judge_hold_below=float(data.get("judge_hold_below", 0.5)),
            judge_unsure_below=float(data.get("judge_unsure_below", 0.0)),
            unsure_dense_share=float(data.get("unsure_dense_share", 0.0)),
            source=str(p),
            lexical_coefficients={
                str(k): float(v) for k, v in data.get("lexical_coefficients", {}).items()
            },
            lexical_bias=float(data.get("lexical_bias", -50.0)),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"fusion.trust_model {p}: {type(exc).__name__}: {exc}") from None


def load_confidence_model(path: Path | None = None) -> ConfidenceModel:
    """The response confidence model in the JSON file ``path`` (default: the one that ships,
    ``hybridsag/fusion/confidence_weights.json``): ``{"coefficients": {feature: weight}, "bias":
    b, "match": {"coefficients": {...}, "bias": b}?, "no_match_below": t, "source": ...}`` as
    ``scripts/fit_confidence.py --out`` writes it (a file without ``match`` flags "no good
    match" from the confidence). Every name of
    :data:`hybridsag.fusion.confidence.FEATURE_NAMES` must be weighed, and no other: a file
    fitted on another feature list is refused, never read with zeros.

    Args:
        path: the JSON file; ``None``: the model that ships.

    Raises:
        ConfigError: the file is missing, is not JSON of that shape, or its features are not
            the model's (the message names them).
    """
    p: Any = (
        resources.files("hybridsag.fusion").joinpath(CONFIDENCE_WEIGHTS)
        if path is None
        else Path(path)
    )
    try:
        data = json.loads(p.read_text("utf-8"))
        match = data.get("match")
        return ConfidenceModel(
            coefficients={str(k): float(v) for k, v in data["coefficients"].items()},
            bias=float(data["bias"]),
            no_match_below=float(data.get("no_match_below", 0.5)),
            source=str(data.get("source", p)),
            match_coefficients=None if match is None else {
                str(k): float(v) for k, v in match["coefficients"].items()},
            match_bias=0.0 if match is None else float(match["bias"]),
        )  # fmt: skip
    except FileNotFoundError:
        raise ConfigError(f"the confidence model {p} does not exist") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"the confidence model {p}: {type(exc).__name__}: {exc}") from None
