"""One way in for every face: the :class:`Backend` protocol, in process or over a service.

The CLI, the MCP server, the LangChain and LlamaIndex adapters and the HTTP service's own
handlers reach the index through a :class:`Backend`. A face parses its input, calls one
operation, renders the answer; it never branches on where the index is.

- :class:`LocalBackend` runs the operations in this process over a
  :class:`~hybridsag.search.HybridSearch`: one the caller hands in (and closes), or one it opens
  itself from settings (:meth:`LocalBackend.from_settings`), on the first operation that needs
  it. One it opens itself is refused (:class:`~hybridsag.errors.ServiceHoldsDataDir`) while a
  running service holds the data dir (:mod:`hybridsag.records.service_lock`), before anything is
  opened: such a command goes through the service instead.
- :class:`RemoteBackend` sends them to a running ``hybridsag serve``
  (:class:`~hybridsag.client.ServiceClient`; the async searches through
  :class:`~hybridsag.client.AsyncServiceClient` on the caller's event loop). Each call opens
  its own client, so a backend holds no socket between calls and may be used from any thread.
- :func:`open_backend` picks one from the settings: remote when ``server.url`` (``--server``)
  is set, local otherwise; :func:`make_backend` one from what a framework adapter is given.

The modules, one job each: :mod:`~hybridsag.backend.protocol` (the :class:`Backend` protocol
and the input checks both sides share; the operations' options, :class:`SearchOptions`,
:class:`ListingOptions`, :class:`FolderOptions` and :class:`FeedbackOptions`, are
:mod:`hybridsag.request`'s, re-exported here), :mod:`~hybridsag.backend.local`,
:mod:`~hybridsag.backend.remote`, :mod:`~hybridsag.backend.health` (the ``doctor`` checks) and
:mod:`~hybridsag.backend.hooks` (the reconciler's protocol and its loader). Import their names
from here.

Both sides take and return the same values: a search's typed
:class:`~hybridsag.results.SearchResponse` (through a service read from its JSON; only the
HTTP and CLI edges turn it into JSON), and JSON-shaped ones for the rest (the ingest report,
``ResourceSummary.as_dict()``, ``ResourceDetail.as_dict()``, the audit report, experiment
states and reports), so a face renders one shape. A resource is ``(tenant, id)``: an
operation on one takes its ``tenant``, where None means the caller's own (in process the
un-tenanted resources, ``""``; through a service the token's tenant, or ``""`` for an admin).

Reconcile and audit come from a :class:`ReconcileHooks`: this package never imports
``hybridsag.consistency``; that package publishes its implementation under the entry-point group
:data:`RECONCILER_GROUP` (pyproject.toml), which :meth:`LocalBackend.from_settings` loads on the
first reconcile, and the ``serve`` command hands the same implementation to the service.

Errors: bad search input raises :class:`QueryValueError` (a
:class:`~hybridsag.errors.QueryError` that is also the ``ValueError`` the frameworks expect);
everything else keeps its ``HybridSagError`` type (``ServiceError`` when the service cannot be
reached, ``AuthError``/``ForbiddenError`` for a refused token, ``NotFoundError`` for an unknown
experiment). This module imports neither the search, the write path, Milvus nor httpx: each
loads on the first operation that needs it, so a face's start-up pays for what it uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybridsag.backend.hooks import RECONCILER_GROUP, ReconcileHooks, load_reconcile_hooks
from hybridsag.backend.local import LocalBackend
from hybridsag.backend.protocol import MAX_QUERY_CHARS, PAGE_MAX, Backend
from hybridsag.backend.remote import RemoteBackend
from hybridsag.errors import ConfigError
from hybridsag.request import FeedbackOptions, FolderOptions, ListingOptions, QueryValueError, SearchOptions

if TYPE_CHECKING:
    from hybridsag.search import HybridSearch
    from hybridsag.settings import Settings

__all__ = [
    "MAX_QUERY_CHARS",
    "PAGE_MAX",
    "RECONCILER_GROUP",
    "Backend",
    "FeedbackOptions",
    "FolderOptions",
    "ListingOptions",
    "LocalBackend",
    "QueryValueError",
    "ReconcileHooks",
    "RemoteBackend",
    "SearchOptions",
    "load_reconcile_hooks",
    "make_backend",
    "open_backend",
]


def open_backend(settings: Settings) -> LocalBackend | RemoteBackend:
    """The backend of ``settings``: a :class:`RemoteBackend` of ``server.url`` (``--server``)
    with ``server.client_token`` (else ``server.token``) when the URL is set, else a
    :class:`LocalBackend` that opens the data dir itself (refused while a service holds it).
    Nothing is opened or connected here."""
    s = settings.server
    if s.url is not None:
        token = s.client_token or s.token
        return RemoteBackend(
            s.url,
            token=token.get_secret_value() if token is not None else None,
            timeout_s=s.client_timeout_s,
            batch_size=s.max_batch,
        )
    return LocalBackend.from_settings(settings)


#: Where a framework adapter's token comes from, as a refused token's AuthError names it.
ADAPTER_TOKEN_SOURCE = "check the token= argument"


def make_backend(
    hybrid_search: HybridSearch | None = None,
    *,
    url: str | None = None,
    token: str | None = None,
    timeout_s: float = 120.0,
) -> LocalBackend | RemoteBackend:
    """The backend for exactly one of ``hybrid_search`` (in process; the caller closes it) and
    ``url`` (a service), as the framework adapters take them: a token the service refuses is
    an AuthError naming the adapter's ``token=`` argument.

    Raises:
        ConfigError: both or neither given, or a ``url`` that is not http(s).
    """
    if (hybrid_search is None) == (url is None):
        raise ConfigError("give either hybrid_search (in process) or url (a running service)")
    if hybrid_search is not None:
        return LocalBackend(hybrid_search)
    assert url is not None
    return RemoteBackend(url, token=token, timeout_s=timeout_s, token_source=ADAPTER_TOKEN_SOURCE)

