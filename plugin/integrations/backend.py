"""What the framework adapters share: one search over a :class:`~hybridsag.search.HybridSearch`
in this process or over a running ``hybridsag serve``, the metadata of a result, and the errors.

- :class:`LocalBackend` calls ``HybridSearch.search``; its async form runs that call in a worker
  thread (``asyncio.to_thread``), since the search itself is synchronous.
- :class:`RemoteBackend` sends ``POST /v1/search``: sync through :class:`ServiceClient`, async
  through :class:`AsyncServiceClient` (``httpx.AsyncClient`` on the caller's event loop, no
  thread). Each call opens its own client, so a backend holds no socket between calls and may be
  used from any thread or event loop.

Bad input (an empty query, a bad filter, an unknown path, a ``top_k`` out of range) raises
:class:`QueryValueError`: a :class:`~hybridsag.errors.QueryError` that is also a ``ValueError``,
the type LangChain and LlamaIndex callers expect for bad arguments, with hybridsag's message
(the service's 422 message when remote). Other failures keep their ``HybridSagError`` type
(``ServiceError`` when the service cannot be reached, ``AuthError`` for a refused token).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from hybridsag.agent import DEFAULT_BUDGET, agent_text, check_budget
from hybridsag.client import AsyncServiceClient, ServiceClient
from hybridsag.errors import ConfigError, IngestError, InputError, NotFoundError, QueryError
from hybridsag.query import validate_query
from hybridsag.store import Filters
from hybridsag.writer import make_document

if TYPE_CHECKING:
    from hybridsag.search import HybridSearch

__all__ = [
    "EXPLAIN_KEYS",
    "ExtraMissingError",
    "LocalBackend",
    "MAX_QUERY_CHARS",
    "QueryValueError",
    "RemoteBackend",
    "SearchBackend",
    "SearchOptions",
    "make_backend",
    "missing_extra",
    "result_metadata",
]

#: Metadata keys that explain a result (how it was found) rather than say what it is; the
#: LlamaIndex adapter keeps them out of the text an LLM or an embedder sees.
EXPLAIN_KEYS = (
    "chunk_id", "rank", "score", "paths", "rules", "why", "byte_start", "byte_end",
    "content_sha256", "stale",
)  # fmt: skip


#: The longest query the service's schema admits (its ``query.max_chars`` may be lower).
MAX_QUERY_CHARS = 1_000_000


class ExtraMissingError(ConfigError, ImportError):
    """An optional integration's framework is not installed; the message names the
    ``pip install 'hybridsag[extra]'`` to run. Both a ``ConfigError`` and an ``ImportError``."""


def missing_extra(extra: str, exc: ImportError) -> ExtraMissingError:
    """The error an adapter raises when importing its framework failed with ``exc``."""
    missing = exc.name.split(".")[0] if exc.name else str(exc)
    return ExtraMissingError(
        f"hybridsag.integrations.{extra} needs the {extra} extra ({missing} is not installed): "
        f"pip install 'hybridsag[{extra}]'"
    )


class QueryValueError(QueryError, ValueError):
    """Bad search input given to an adapter: hybridsag's :class:`QueryError` that is also the
    ``ValueError`` the frameworks expect. ``__cause__`` is the original error."""


def _value_error(exc: InputError) -> QueryValueError:
    """``exc`` as a QueryValueError (raise it ``from exc``)."""
    return QueryValueError(str(exc))


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """What every search of an adapter passes besides the query; checked when built.

    ``top_k``: results (1..1000); ``paths``: recall path names (None: ``search.paths`` of the
    searching side); ``filters``: as ``HybridSearch.search`` takes them (tenant, acl, metadata,
    resource_ids, statuses); ``include_stale``: None for the searching side's setting.

    Raises:
        QueryValueError: a ``top_k`` out of range or a bad filter, naming it.
    """

    top_k: int = 5
    paths: tuple[str, ...] | None = None
    filters: Mapping[str, Any] = field(default_factory=dict)
    include_stale: bool | None = None

    def __post_init__(self) -> None:
        top_k = self.top_k
        if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 1000:
            raise QueryValueError(f"top_k must be an integer in 1..1000, got {top_k!r}")
        if isinstance(self.paths, str):
            raise QueryValueError(f"paths must be a list of path names, got {self.paths!r}")
        try:
            Filters.from_mapping(self.filters)
        except InputError as exc:
            raise _value_error(exc) from exc


class SearchBackend(Protocol):
    """A search an adapter calls: the response as ``SearchResponse.as_dict()`` gives it, or
    its agent text (:class:`QueryValueError` for bad input); and the writes the MCP server
    offers (hybridsag's ``InputError`` for bad input)."""

    def search(self, query: str, options: SearchOptions) -> dict[str, Any]: ...

    async def asearch(self, query: str, options: SearchOptions) -> dict[str, Any]: ...

    def search_agent(self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET) -> str: ...

    async def asearch_agent(self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET) -> str: ...

    def ingest(self, resources: Sequence[Mapping[str, Any]]) -> dict[str, Any]: ...

    def delete(self, resource_id: str) -> bool: ...


class LocalBackend:
    """Searches a :class:`HybridSearch` of this process (the caller owns and closes it)."""

    def __init__(self, hybrid_search: HybridSearch) -> None:
        self.hybrid_search = hybrid_search

    def check_paths(self, paths: Sequence[str] | None) -> None:
        """QueryValueError naming an unknown path (or none left with the dense side off)."""
        if paths is not None:
            try:
                self.hybrid_search.resolve_paths(paths)
            except InputError as exc:
                raise _value_error(exc) from exc

    def search(self, query: str, options: SearchOptions) -> dict[str, Any]:
        try:
            response = self.hybrid_search.search(
                query,
                top_k=options.top_k,
                paths=options.paths,
                filters=options.filters,
                include_stale=options.include_stale,
            )
        except InputError as exc:
            raise _value_error(exc) from exc
        return response.as_dict()

    async def asearch(self, query: str, options: SearchOptions) -> dict[str, Any]:
        """:meth:`search` in a worker thread: the in-process search is synchronous."""
        return await asyncio.to_thread(self.search, query, options)

    def search_agent(self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET) -> str:
        return agent_text(self.search(query, options), _budget(budget))

    async def asearch_agent(self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET) -> str:
        return agent_text(await self.asearch(query, options), _budget(budget))

    def ingest(self, resources: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Ingest ``resources`` (``id``, ``text``, optional ``title``, ``metadata``, ``tenant``,
        ``acl``, ``format``): all checked first, so one bad entry refuses the batch (an
        :class:`~hybridsag.errors.IngestError` naming ``resources[i]``) before anything is
        written, as the service does. Returns the ingest report."""
        docs = []
        for i, r in enumerate(resources):
            try:
                docs.append(
                    make_document(
                        r["id"], r["text"], title=r.get("title", ""),
                        metadata=r.get("metadata"), tenant=r.get("tenant") or "",
                        acl=r.get("acl") or (), fmt=r.get("format", "markdown"),
                    )
                )
            except InputError as exc:
                raise IngestError(f"resources[{i}]: {exc}") from exc
        return self.hybrid_search.ingest_documents(docs).as_dict()

    def delete(self, resource_id: str) -> bool:
        """Delete a resource on every path; False when there is none."""
        return self.hybrid_search.delete(resource_id)


def _budget(budget: int) -> int:
    try:
        return check_budget(budget)
    except ValueError as exc:
        raise QueryValueError(str(exc)) from exc


class RemoteBackend:
    """Searches a running ``hybridsag serve`` at ``url`` with a bearer ``token`` (a read token
    is enough; a tenant-scoped token sees only its tenant, whatever ``filters`` say)."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 120.0) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"url must be an http:// or https:// URL, got {url!r}")
        self.url = url.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s

    @staticmethod
    def _check(query: str) -> str:
        """The checks of ``validate_query`` that need no setting (blank, control characters),
        made here so the message is hybridsag's own; the length limit is the service's."""
        try:
            return validate_query(query, max_chars=MAX_QUERY_CHARS)
        except InputError as exc:
            raise _value_error(exc) from exc

    def _kwargs(self, options: SearchOptions) -> dict[str, Any]:
        return {
            "top_k": options.top_k,
            "paths": options.paths,
            "filters": options.filters,
            "include_stale": options.include_stale,
        }

    def client(self) -> ServiceClient:
        """A new sync client of the service (the caller closes it)."""
        return ServiceClient(self.url, token=self._token, timeout=self.timeout_s)

    def search(self, query: str, options: SearchOptions) -> dict[str, Any]:
        try:
            with self.client() as client:
                return client.search(self._check(query), **self._kwargs(options))
        except InputError as exc:
            raise _value_error(exc) from exc

    async def asearch(self, query: str, options: SearchOptions) -> dict[str, Any]:
        """``POST /v1/search`` over ``httpx.AsyncClient`` on the running event loop."""
        try:
            async with AsyncServiceClient(
                self.url, token=self._token, timeout=self.timeout_s
            ) as client:
                return await client.search(self._check(query), **self._kwargs(options))
        except InputError as exc:
            raise _value_error(exc) from exc

    def search_agent(self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET) -> str:
        try:
            with self.client() as client:
                return client.search_agent(
                    self._check(query), budget=_budget(budget), **self._kwargs(options)
                )
        except InputError as exc:
            raise _value_error(exc) from exc

    def ingest(self, resources: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``POST /v1/resources``: one bad entry refuses the batch (InputError naming it); a
        read token is refused (ForbiddenError). Returns the ingest report."""
        with self.client() as client:
            return client.ingest(list(resources))

    def delete(self, resource_id: str) -> bool:
        """``DELETE /v1/resources/{id}``; False when there is none (or none this token sees)."""
        with self.client() as client:
            try:
                return bool(client.delete(resource_id)["done"])
            except NotFoundError:
                return False

    async def asearch_agent(self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET) -> str:
        try:
            async with AsyncServiceClient(
                self.url, token=self._token, timeout=self.timeout_s
            ) as client:
                return await client.search_agent(
                    self._check(query), budget=_budget(budget), **self._kwargs(options)
                )
        except InputError as exc:
            raise _value_error(exc) from exc


def make_backend(
    hybrid_search: HybridSearch | None = None,
    *,
    url: str | None = None,
    token: str | None = None,
    timeout_s: float = 120.0,
) -> LocalBackend | RemoteBackend:
    """The backend for exactly one of ``hybrid_search`` (in process) and ``url`` (a service).

    Raises:
        ConfigError: both or neither given, or a ``url`` that is not http(s).
    """
    if (hybrid_search is None) == (url is None):
        raise ConfigError("give either hybrid_search (in process) or url (a running service)")
    if hybrid_search is not None:
        return LocalBackend(hybrid_search)
    assert url is not None
    return RemoteBackend(url, token=token, timeout_s=timeout_s)


def result_metadata(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result's metadata for a framework's document: what it is (``resource_id``, ``title``,
    ``heading_path``, ``start_line``/``end_line``, ``byte_start``/``byte_end``,
    ``content_sha256``, ``source_uri``) and how it was found (``chunk_id``, ``rank``, ``score``
    = the fused score, ``paths`` = each path's ``rank``, ``score``, ``raw_score``, ``rrf_term``
    and facts such as ``judge_p``, ``rules``, ``why``, ``stale``)."""
    keys = (
        "resource_id", "title", "heading_path", "start_line", "end_line", "byte_start",
        "byte_end", "content_sha256", "source_uri", "chunk_id", "rank", "score",
    )  # fmt: skip
    out = {k: result[k] for k in keys}
    out["paths"] = {name: dict(facts) for name, facts in result["paths"].items()}
    out["rules"] = list(result["rules"])
    out["why"] = list(result["why"])
    out["stale"] = bool(result.get("stale", False))
    return out
