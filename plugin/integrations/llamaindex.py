"""A LlamaIndex retriever over hybridsag: ``pip install 'hybridsag[llamaindex]'``.

:class:`HybridSagRetriever` is a ``llama_index.core`` ``BaseRetriever``: ``retrieve``,
``aretrieve`` and everything built on a retriever (``RetrieverQueryEngine``, a chat engine)
work. It searches a :class:`~hybridsag.search.HybridSearch` of this process (``hybrid_search``)
or a running ``hybridsag serve`` (``url=`` and ``token=``)::

    from llama_index.core.query_engine import RetrieverQueryEngine
    from hybridsag.integrations.llamaindex import HybridSagRetriever
    retriever = HybridSagRetriever(url="http://127.0.0.1:8765", token=TOKEN, top_k=5)
    engine = RetrieverQueryEngine.from_args(retriever, llm=my_llm)
    print(engine.query("how do I reset E-1234?"))

Each ``NodeWithScore`` holds a ``TextNode`` (id: the chunk id, text: the chunk text, metadata:
:func:`~hybridsag.integrations.result_metadata`, source: the resource id; fields without a
value, such as a blank heading path, left out; the response's ``confidence`` and
``no_good_match`` and the result's ``stale`` at its top) and a score that never rises down the
list: the result's score (already so; capped at the node above's for a response of an older
service, whose scores followed fusion's order), so a score-cutoff postprocessor cuts the list's
tail, never a hole in it. The same score stays in ``metadata["score"]``, the fusion's own in
``metadata["fused_score"]``. The explain keys (:data:`~hybridsag.integrations.EXPLAIN_KEYS`: ranks, scores,
rules, byte range, hash) are left out of what the LLM and an embedder see; resource id, title,
heading path, lines and source file stay in, so an answer can cite them.

Async: against a service ``aretrieve`` sends the request with ``httpx.AsyncClient`` on the
caller's event loop; in process it runs the (synchronous) search in a worker thread.

Errors: bad arguments at construction (a bad filter, ``top_k`` out of range, an unknown path in
process) and a bad call (an empty query, a path or filter the service refuses) raise
:class:`~hybridsag.backend.QueryValueError`, a ``ValueError`` (what LlamaIndex
raises for bad arguments) and a hybridsag ``QueryError``, with hybridsag's message; neither or
both of ``hybrid_search`` and ``url`` is a ``ConfigError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hybridsag.backend import SearchOptions, make_backend
from hybridsag.integrations import EXPLAIN_KEYS, missing_extra, response_marks, result_metadata

if TYPE_CHECKING:
    from hybridsag.search import HybridSearch

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import (
        NodeRelationship,
        NodeWithScore,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
except ImportError as exc:
    raise missing_extra("llamaindex", exc) from exc

__all__ = ["HybridSagRetriever", "to_node", "to_nodes"]


def to_nodes(
    results: Sequence[Mapping[str, Any]], *, marks: Mapping[str, Any] | None = None
) -> list[NodeWithScore]:
    """Search results in rank order as nodes whose scores never rise (see the module
    docstring): each is its score, or the node above's score when that is lower (a response
    of an older service, whose scores followed fusion's order); ``marks`` (the response's
    :func:`~hybridsag.integrations.response_marks`: ``confidence``, ``no_good_match``) go to the
    top of every node's metadata.

    Args:
        results: The results in rank order, each as ``SearchResult.as_dict()`` gives it.
        marks: What goes to the top of every node's metadata; None: nothing.
    """
    nodes: list[NodeWithScore] = []
    for r in results:
        node = to_node(r)
        if marks:
            node.node.metadata.update(marks)
        if nodes and nodes[-1].score is not None and node.score is not None:
            node.score = min(node.score, nodes[-1].score)
        nodes.append(node)
    return nodes


def to_node(result: Mapping[str, Any]) -> NodeWithScore:
    """One search result (``SearchResult.as_dict()``) as a LlamaIndex ``NodeWithScore`` (its
    score the fused score: :func:`to_nodes` keeps a list's scores non-increasing).

    Args:
        result: The result as ``SearchResult.as_dict()`` gives it.
    """
    node = TextNode(
        id_=result["chunk_id"],
        text=result["text"],
        metadata=result_metadata(result),
        excluded_llm_metadata_keys=list(EXPLAIN_KEYS),
        excluded_embed_metadata_keys=list(EXPLAIN_KEYS),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=result["resource_id"])},
    )
    return NodeWithScore(node=node, score=result["score"])


class HybridSagRetriever(BaseRetriever):
    """Hybrid search (SAG2, dense, title; merged by trust and convex fusion) as a LlamaIndex retriever.

    Give ``hybrid_search`` (in process; the caller closes it) or ``url`` and ``token`` (a
    running ``hybridsag serve``; a read token is enough). ``top_k``, ``paths``, ``filters``,
    ``include_stale`` and ``min_confidence`` (0..1: no nodes when the response's confidence is
    below it) apply to every call (None: the searching side's settings).

    Args:
        hybrid_search: The search of this process to call (the caller closes it); or give
            ``url``.
        url: The root URL of a running ``hybridsag serve`` to call; or give
            ``hybrid_search``.
        token: The service's bearer token (a read token is enough); None: none sent.
        timeout_s: Seconds a request to the service may take.
        top_k: Nodes a call returns at most (1..1000).
        paths: The paths to run; None: the searching side's ``search.paths``.
        filters: Who may see what (``tenant``, ``acl``, ``metadata``, ``resource_ids``,
            ``statuses``); a service forces a tenant token's tenant and tags into them.
        include_stale: Return (True) or hold back (False) results whose source changed since
            indexing; None: the searching side's ``search.include_stale``.
        min_confidence: A number in 0..1: no nodes when the response's confidence is below
            it; None: never withhold.
        callback_manager: LlamaIndex's callback manager, passed to ``BaseRetriever``.
        verbose: LlamaIndex's verbose flag, passed to ``BaseRetriever``.

    Raises:
        QueryValueError: a bad filter, ``top_k`` out of range, or (in process) an unknown path.
        ConfigError: neither or both of ``hybrid_search`` and ``url``, or a bad ``url``.

    >>> HybridSagRetriever(hs, top_k=3).retrieve("E-1234")[0].node.metadata["title"]  # doctest: +SKIP
    'FAQ'
    """

    def __init__(
        self,
        hybrid_search: HybridSearch | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        timeout_s: float = 120.0,
        top_k: int = 5,
        paths: Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        include_stale: bool | None = None,
        min_confidence: float | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self._backend = make_backend(hybrid_search, url=url, token=token, timeout_s=timeout_s)
        self._options = SearchOptions(
            top_k=top_k,
            paths=tuple(paths) if paths is not None else None,
            filters=dict(filters or {}),
            include_stale=include_stale,
            min_confidence=min_confidence,
        )
        self._backend.check_paths(self._options.paths)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        response = self._backend.search(query_bundle.query_str, self._options).as_dict()
        return to_nodes(response["results"], marks=response_marks(response))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        response = (await self._backend.asearch(query_bundle.query_str, self._options)).as_dict()
        return to_nodes(response["results"], marks=response_marks(response))
