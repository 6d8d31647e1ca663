"""A LangChain retriever over hybridsag: ``pip install 'hybridsag[langchain]'``.

:class:`HybridSagRetriever` is a ``langchain_core`` ``BaseRetriever``, so ``invoke``,
``ainvoke``, ``batch``, ``abatch`` and LCEL chains work as with any retriever. It searches either
a :class:`~hybridsag.search.HybridSearch` of this process (``hybrid_search=``) or a running
``hybridsag serve`` (``url=`` and ``token=``)::

    from hybridsag.integrations.langchain import HybridSagRetriever
    retriever = HybridSagRetriever(url="http://127.0.0.1:8765", token=TOKEN, top_k=5,
                                   filters={"tenant": "acme"}, paths=["sag2", "title"])
    docs = retriever.invoke("how do I reset E-1234?")
    docs[0].metadata["resource_id"], docs[0].metadata["paths"]["sag2"]["rank"]

Each ``Document`` has the chunk text as ``page_content``, the chunk id as ``id`` and, as
``metadata``, :func:`~hybridsag.integrations.result_metadata`: resource id, title,
heading path, lines, byte range, content hash, source file, ``stale`` (its source changed on
disk since it was indexed), the response's ``confidence`` and ``no_good_match`` (so a pipeline can
gate on any document), ``score`` (never rising down the list) with the fusion's own
``fused_score``, ``rank``, and the explain data (``paths``: each path's rank, score, raw score and RRF term; ``rules``;
``why``: this result's own explanation, as ``hybridsag search`` words it). Fields without a
value (a blank heading path, no source file) are left out. What holds for the whole query (the
paths that ran, degraded paths, the trust step's weights:
:func:`~hybridsag.integrations.query_facts`) is said once, in the first Document's
``metadata["query_facts"]``, not on every Document.

Async: against a service ``ainvoke`` sends the request with ``httpx.AsyncClient`` on the
caller's event loop; in process it runs the (synchronous) search in a worker thread.

Errors: bad fields at construction (a bad filter, ``top_k`` out of range, an unknown path in
process, neither or both of ``hybrid_search`` and ``url``) raise pydantic's
``ValidationError`` (a ``ValueError``) carrying hybridsag's message; a bad call (an empty query,
a path or filter the service refuses) raises
:class:`~hybridsag.backend.QueryValueError` (a ``ValueError`` and a hybridsag
``QueryError``). Other failures keep their hybridsag type (``ServiceError``, ``AuthError``...).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, InstanceOf, SecretStr, model_validator

from hybridsag.backend import Backend, SearchOptions, make_backend
from hybridsag.errors import ConfigError
from hybridsag.integrations import missing_extra, query_facts, response_marks, result_metadata
from hybridsag.search import HybridSearch

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:
    raise missing_extra("langchain", exc) from exc

__all__ = ["HybridSagRetriever", "to_document", "to_documents"]


def to_document(result: dict[str, Any]) -> Document:
    """One search result as a LangChain ``Document``.

    Args:
        result: The result as ``SearchResult.as_dict()`` gives it.
    """
    return Document(page_content=result["text"], id=result["chunk_id"], metadata=result_metadata(result))


def to_documents(response: dict[str, Any]) -> list[Document]:
    """A search response's results as Documents, in rank order, each with the response's
    ``confidence`` and ``no_good_match`` at the top of its metadata
    (:func:`~hybridsag.integrations.response_marks`); the first one's metadata also holds
    ``query_facts`` (:func:`~hybridsag.integrations.query_facts`), said once.

    Args:
        response: The response as ``SearchResponse.as_dict()`` gives it.
    """
    marks = response_marks(response)
    docs = [to_document(r) for r in response["results"]]
    for doc in docs:
        doc.metadata.update(marks)
    if docs and (facts := query_facts(response)):
        docs[0].metadata["query_facts"] = facts
    return docs


class HybridSagRetriever(BaseRetriever):
    """Hybrid search (SAG2, dense, title; merged by trust and convex fusion) as a LangChain retriever.

    Give ``hybrid_search`` (in process; the caller closes it) or ``url`` and ``token`` (a
    running ``hybridsag serve``; a read token is enough). ``top_k``, ``paths``, ``filters``,
    ``include_stale`` and ``min_confidence`` (0..1: no documents when the response's confidence
    is below it) apply to every call (None: the searching side's settings).

    >>> retriever = HybridSagRetriever(hybrid_search=hs, top_k=3)   # doctest: +SKIP
    >>> retriever.invoke("E-1234")[0].metadata["resource_id"]       # doctest: +SKIP
    'faq'
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    #: The search of this process to call (the caller closes it); or give ``url``.
    hybrid_search: InstanceOf[HybridSearch] | None = None
    #: The root URL of a running ``hybridsag serve`` to call; or give ``hybrid_search``.
    url: str | None = None
    #: The service's bearer token (a read token is enough); None: none sent.
    token: SecretStr | None = None
    #: Seconds a request to the service may take.
    timeout_s: float = Field(120.0, gt=0, le=3600)
    #: Documents a call returns at most.
    top_k: int = Field(5, ge=1, le=1000)
    #: The paths to run (``["sag2", "title"]``); None: the searching side's ``search.paths``.
    paths: list[str] | None = None
    #: Who may see what (``tenant``, ``acl``, ``metadata``, ``resource_ids``, ``statuses``);
    #: a service forces a tenant token's tenant and tags into them.
    filters: dict[str, Any] = Field(default_factory=dict)
    #: Return (True) or hold back (False) results whose source changed since indexing; None:
    #: the searching side's ``search.include_stale``.
    include_stale: bool | None = None
    #: A number in 0..1: no documents when the response's confidence is below it; None:
    #: never withhold.
    min_confidence: float | None = None

    @model_validator(mode="after")
    def _check(self) -> HybridSagRetriever:
        try:
            backend = self._backend()
        except ConfigError as exc:  # not a ValueError: pydantic would not report it
            raise ValueError(str(exc)) from exc
        self._options()  # QueryValueError is a ValueError: reported by pydantic
        backend.check_paths(self.paths)
        return self

    def _backend(self) -> Backend:
        return make_backend(
            self.hybrid_search,
            url=self.url,
            token=self.token.get_secret_value() if self.token is not None else None,
            timeout_s=self.timeout_s,
        )

    def _options(self) -> SearchOptions:
        return SearchOptions(
            top_k=self.top_k,
            paths=tuple(self.paths) if self.paths is not None else None,
            filters=self.filters,
            include_stale=self.include_stale,
            min_confidence=self.min_confidence,
        )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return to_documents(self._backend().search(query, self._options()).as_dict())

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return to_documents((await self._backend().asearch(query, self._options())).as_dict())
