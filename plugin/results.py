"""What a search answers: :class:`SearchResponse` and its :class:`SearchResult` rows, frozen,
with their JSON forms (``as_dict`` / ``from_dict``: what the service sends and the CLI renders).

A leaf: besides the standard library it imports only the agent-text renderer it offers as
:meth:`SearchResponse.as_agent_text` (``hybridsag.output.agent``, its budget and focus
helpers: pure text functions), never the search, an index or a model, so a face that only
renders an answer (``hybridsag --server URL search``) loads these types and nothing behind them
(``tests/unit/test_layering.py`` holds it to that).
:class:`~hybridsag.search.HybridSearch` builds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from hybridsag.output.agent import agent_text
from hybridsag.output.budget import DEFAULT_BUDGET

__all__ = ["SearchResponse", "SearchResult"]


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One result with everything needed to show and explain it."""

    #: its 1-based place in the response
    rank: int
    #: the chunk shown (merged neighbours: ``merged``)
    chunk_id: str
    #: its resource's id (within ``tenant``)
    resource_id: str
    #: the resource's title
    title: str
    #: the headings above the chunk (blank outside any section)
    heading_path: str
    #: the text: the chunk's, with its merged neighbours' (cut to ``search.max_text_chars``:
    #: ``text_truncated``)
    text: str
    #: the first line of the source the result spans (1-based)
    start_line: int
    #: its last line
    end_line: int
    #: the byte offset in the source where it starts
    byte_start: int
    #: the byte offset where it ends
    byte_end: int
    #: the SHA-256 of ``text`` (hex)
    content_sha256: str
    #: the source file or URI it was ingested from; None when none was given
    source_uri: str | None
    #: the score of its place: never higher than the result above's (``fused_score``: the
    #: fusion's own)
    score: float
    #: per path that found it: its ``rank``, ``score``, ``raw_score`` (both None for a path
    #: whose scores a tenant-scoped search hides), ``rrf_term`` and the path's facts
    paths: Mapping[str, Mapping[str, Any]]
    #: the names of the fusion rules that fired on it (:data:`hybridsag.fusion.RULE_REASONS`)
    rules: tuple[str, ...]
    #: its explanation, a line each (empty when the search's ``explain`` was off)
    why: tuple[str, ...]
    #: its source file changed on disk since it was indexed (``stale_reason`` says how)
    stale: bool = False
    #: the position fusion (convex or RRF) gave the chunk before the rules moved it
    #: (``fused_score`` follows this one)
    rrf_rank: int = 0
    #: ``text`` was cut to ``search.max_text_chars`` (byte and line ranges are the chunk's)
    text_truncated: bool = False
    #: the resource's tenant (``""``: un-tenanted); a resource is ``(tenant, resource_id)``, so
    #: two results may share a ``resource_id`` in two tenants
    tenant: str = ""
    #: why ``stale`` is set (:data:`hybridsag.search.STALE_CHANGED`, ...); None when fresh
    stale_reason: str | None = None
    #: where else the same (or a near-identical) text is, folded into this result by fusion
    #: (:func:`hybridsag.fusion.dedupe.collapse_duplicates`): per copy its ``chunk_id``,
    #: ``resource_id``, ``tenant``, ``title``, ``source_uri``, ``heading_path``, ``start_line``
    #: and ``end_line``, in fused order
    also_in: tuple[Mapping[str, Any], ...] = ()
    #: the fusion's own score (convex or RRF; it follows ``rrf_rank``); ``score`` is the same
    #: scores made non-increasing down the final order (:func:`hybridsag.fusion.monotone_scores`:
    #: where a rule put a result above one fusion scored higher, the two share their mean).
    #: None only in a response of an older service, whose ``score`` was this one
    fused_score: float | None = None
    #: the chunk ids of the neighbouring chunks of its section merged into this result
    #: (:func:`hybridsag.fusion.merge_adjacent`), in source order. The line and byte ranges then
    #: span them and ``chunk_id``'s chunk together, and ``text`` is their texts joined in source
    #: order, the sentences two of them share said once; where the source between two of them
    #: holds only what no chunk holds (markup the chunker leaves out, blank lines), a blank line
    #: stands for it, so ``text`` is the source's bytes of that range only where the chunks
    #: overlap or touch. ``content_sha256`` is ``text``'s
    merged: tuple[str, ...] = ()
    #: its resource's further results that the per-resource cap (``fusion.max_per_resource``)
    #: moved below the other resources' results, and that are not listed above: per result its
    #: ``chunk_id``, ``resource_id``, ``tenant``, ``title``, ``source_uri``, ``heading_path``,
    #: ``start_line`` and ``end_line`` (as ``also_in``), set on the resource's best result
    more_in_resource: tuple[Mapping[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["paths"] = {k: dict(v) for k, v in self.paths.items()}
        out["also_in"] = [dict(a) for a in self.also_in]
        out["merged"] = list(self.merged)
        out["more_in_resource"] = [dict(a) for a in self.more_in_resource]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchResult:
        """The result :meth:`as_dict` wrote (the service's JSON); unknown keys are ignored.

        Args:
            data: The result's JSON object.
        """
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["rules"] = tuple(values.get("rules", ()))
        values["why"] = tuple(values.get("why", ()))
        values["also_in"] = tuple(dict(a) for a in values.get("also_in", ()))
        values["merged"] = tuple(values.get("merged", ()))
        values["more_in_resource"] = tuple(dict(a) for a in values.get("more_in_resource", ()))
        return cls(**values)


@dataclass(frozen=True, slots=True)
class SearchResponse:
    """What a search answers: the ranked results and how they were found."""

    #: the query as searched (stripped)
    query: str
    #: the results, best first
    results: tuple[SearchResult, ...]
    #: milliseconds per path (``<path>_ms``), ``fusion_ms``, ``trust_ms`` and ``total_ms``
    timings: Mapping[str, float]
    #: the paths that ran
    paths: tuple[str, ...]
    #: a path failed or degraded (``reasons`` says which and why)
    degraded: bool = False
    #: path name -> why it was left out or degraded
    reasons: Mapping[str, str] = field(default_factory=dict)
    #: path name -> what the path reports of its work; ``remote``: each remote model's calls,
    #: when one was called; ``remote_budget``: the search's remote budget, when it had one
    usage: Mapping[str, Any] = field(default_factory=dict)
    #: each path's own stage timings in ms (tokenize, FTS5, embed, Milvus, judge, ...)
    stages: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: the per-query trust step's decision (weights, judge_holds, dense_share, signals), empty
    #: when fusion.trust is off
    trust: Mapping[str, Any] = field(default_factory=dict)
    #: results held back because their source files changed since indexing (with ``include_stale``
    #: off): how many, and each one's ``chunk_id``, ``resource_id``, ``tenant`` and ``reason``
    #: (:data:`hybridsag.search.STALE_CHANGED`, ...). Only those that would have been shown are
    #: counted: the stale results met before ``top_k`` fresh ones were found
    stale_hidden: int = 0
    #: each held-back result's ``chunk_id``, ``resource_id``, ``tenant`` and ``reason``
    stale_hidden_ids: tuple[Mapping[str, Any], ...] = ()
    #: the calibrated probability (0..1) that the top result answers the query
    #: (:mod:`hybridsag.fusion.confidence`), computed before ``min_confidence`` withholds
    #: anything; 0 when the search found nothing; None only in a response of an older
    #: service, which did not compute it
    confidence: float | None = None
    #: the match (the confidence model's probability that the index holds an answer at all)
    #: is below ``search.no_match_below``: the results (if any are listed) are weak, and the
    #: CLI and agent output say "no good match"
    no_good_match: bool = False
    #: why the results were withheld (the search's ``min_confidence`` was above
    #: ``confidence``); None when nothing was
    withheld: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "stages": {k: dict(v) for k, v in self.stages.items()},
            "paths": list(self.paths),
            "degraded": self.degraded,
            "reasons": dict(self.reasons),
            "timings": dict(self.timings),
            "usage": {k: dict(v) if isinstance(v, Mapping) else v for k, v in self.usage.items()},
            "trust": {k: dict(v) if isinstance(v, Mapping) else v for k, v in self.trust.items()},
            "stale_hidden": self.stale_hidden,
            "stale_hidden_ids": [dict(h) for h in self.stale_hidden_ids],
            "confidence": self.confidence,
            "no_good_match": self.no_good_match,
            "withheld": self.withheld,
            "results": [r.as_dict() for r in self.results],
        }

    def as_agent_text(self, budget: int = DEFAULT_BUDGET) -> str:
        """The results grouped by file and heading, with line numbers and short quotes, in at
        most ``budget`` characters (:func:`hybridsag.output.agent.agent_text`); ValueError for a
        budget outside ``MIN_BUDGET..MAX_BUDGET``.

        Args:
            budget: Characters of the text at most.
        """
        return agent_text(self.as_dict(), budget)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchResponse:
        """The response :meth:`as_dict` wrote (the service's JSON), to render it as in-process.

        Args:
            data: The response's JSON object (keys it lacks take their defaults, but
                ``query``).
        """
        return cls(
            query=data["query"],
            results=tuple(SearchResult.from_dict(r) for r in data.get("results", ())),
            timings=dict(data.get("timings", {})),
            paths=tuple(data.get("paths", ())),
            degraded=bool(data.get("degraded", False)),
            reasons=dict(data.get("reasons", {})),
            usage=dict(data.get("usage", {})),
            stages=dict(data.get("stages", {})),
            trust=dict(data.get("trust", {})),
            stale_hidden=int(data.get("stale_hidden", 0)),
            stale_hidden_ids=tuple(dict(h) for h in data.get("stale_hidden_ids", ())),
            confidence=None if data.get("confidence") is None else float(data["confidence"]),
            no_good_match=bool(data.get("no_good_match", False)),
            withheld=None if data.get("withheld") is None else str(data["withheld"]),
        )
