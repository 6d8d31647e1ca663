"""Adapters for the RAG frameworks and agents people already run, each an optional extra:

- :mod:`hybridsag.integrations.langchain`: a LangChain ``BaseRetriever``
  (``pip install 'hybridsag[langchain]'``);
- :mod:`hybridsag.integrations.llamaindex`: a LlamaIndex ``BaseRetriever``
  (``pip install 'hybridsag[llamaindex]'``);
- :mod:`hybridsag.integrations.mcp_server`: ``hybridsag mcp``, an MCP server over stdio
  (``pip install 'hybridsag[mcp]'``).

Each imports its framework inside its own module, so ``import hybridsag`` (and this package)
never imports LangChain, LlamaIndex or MCP; importing an adapter whose extra is missing raises
:class:`ExtraMissingError` naming the ``pip install`` to run. Each reaches the index through
:mod:`hybridsag.backend` (a search in process or over the HTTP service), as the CLI and the
service's handlers do; what only the adapters share (a result's metadata, the missing-extra
error) is here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hybridsag.backend import QueryValueError
from hybridsag.errors import ConfigError
from hybridsag.output.render import explain_lines
from hybridsag.results import SearchResult

__all__ = [
    "EXPLAIN_KEYS", "ExtraMissingError", "QueryValueError", "missing_extra", "query_facts",
    "response_marks", "result_metadata",
]  # fmt: skip

#: Metadata keys that explain a result (how it was found) rather than say what it is; the
#: LlamaIndex adapter keeps them out of the text an LLM or an embedder sees.
EXPLAIN_KEYS = (
    "chunk_id", "rank", "score", "fused_score", "paths", "rules", "why", "byte_start",
    "byte_end", "content_sha256", "stale", "stale_reason", "confidence", "no_good_match",
)  # fmt: skip


class ExtraMissingError(ConfigError, ImportError):
    """An optional integration's framework is not installed; the message names the
    ``pip install 'hybridsag[extra]'`` to run. Both a ``ConfigError`` and an ``ImportError``."""


def missing_extra(extra: str, exc: ImportError) -> ExtraMissingError:
    """The error an adapter raises when importing its framework failed with ``exc``.

    Args:
        extra: The extra's name (``"langchain"``), which is also the adapter module's.
        exc: The ImportError its framework's import raised.
    """
    missing = exc.name.split(".")[0] if exc.name else str(exc)
    return ExtraMissingError(
        f"hybridsag.integrations.{extra} needs the {extra} extra ({missing} is not installed): "
        f"pip install 'hybridsag[{extra}]'"
    )


def result_metadata(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result's metadata for a framework's document: what it is (``resource_id``, ``title``,
    ``heading_path``, ``start_line``/``end_line``, ``byte_start``/``byte_end``,
    ``content_sha256``, ``source_uri``) and how it was found (``chunk_id``, ``rank``, ``score``
    = the score of its place, which never rises down the list, ``fused_score`` = the fusion's
    own, ``paths`` = each path's ``rank``, ``score``, ``raw_score`` (both None
    for bm25, sag2 and title in a tenant-scoped search), ``rrf_term`` and facts such as
    ``judge_p``, ``rules``, ``why``, ``stale`` with its ``stale_reason``).

    ``why`` is this result's own explanation, worded as ``hybridsag search`` words it
    (:func:`hybridsag.output.render.explain_lines`: its paths, rules and staleness); what holds
    for the whole query (the trust step's weights) is not repeated on every result (see
    :func:`query_facts`). A field without a value (a blank ``heading_path`` or ``title``, a
    ``source_uri`` of None) is left out rather than shown empty.

    Args:
        result: One result as ``SearchResult.as_dict()`` gives it.
    """
    keys = (
        "resource_id", "title", "heading_path", "start_line", "end_line", "byte_start",
        "byte_end", "content_sha256", "source_uri", "chunk_id", "rank", "score", "fused_score",
        "stale_reason",
    )  # fmt: skip
    out = {k: result[k] for k in keys if result.get(k) not in (None, "")}
    out["paths"] = {name: dict(facts) for name, facts in result["paths"].items()}
    out["rules"] = list(result["rules"])
    out["why"] = explain_lines(SearchResult.from_dict(result))
    out["stale"] = bool(result.get("stale", False))
    return out


def query_facts(response: Mapping[str, Any]) -> dict[str, Any]:
    """What a search response says of the whole query, not of one result: the ``query``, the
    ``paths`` that ran, ``degraded`` with each degraded path's ``reasons``, the trust
    step's decision (``trust``: weights, judge_holds, dense_share, signals; left out when
    ``fusion.trust`` is off), the ``confidence`` that the top result answers the query with
    ``no_good_match`` (the match below ``search.no_match_below``) and ``withheld`` (why
    ``min_confidence`` withheld the results), each left out when empty.

    Args:
        response: A response as ``SearchResponse.as_dict()`` gives it.
    """
    keys = ("query", "paths", "degraded", "reasons", "trust", "confidence", "no_good_match",
            "withheld")  # fmt: skip
    facts = {k: response.get(k) for k in keys}
    return {k: v for k, v in facts.items() if v not in (None, "", {}, [])}


def response_marks(response: Mapping[str, Any]) -> dict[str, Any]:
    """What every result of a response carries at the top of its metadata, so that a pipeline
    can gate on any one document without looking for the first: the response's ``confidence``
    (the calibrated probability that the top result answers the query; left out in a response
    of an older service, which had none) and ``no_good_match`` (the match, the probability
    that the index holds an answer, below ``search.no_match_below``). A result's own ``stale`` is in :func:`result_metadata`.

    Args:
        response: A response as ``SearchResponse.as_dict()`` gives it.
    """
    marks: dict[str, Any] = {"no_good_match": bool(response.get("no_good_match", False))}
    if response.get("confidence") is not None:
        marks["confidence"] = float(response["confidence"])
    return marks
