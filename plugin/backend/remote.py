"""The operations of a running ``hybridsag serve``: :class:`RemoteBackend`.

Sent through :class:`~hybridsag.client.ServiceClient` (the async searches through
:class:`~hybridsag.client.AsyncServiceClient` on the caller's event loop). Each call opens its
own client, so a backend holds no socket between calls and may be used from any thread; httpx
loads on the first call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsag.backend.health import remote_health
from hybridsag.backend.protocol import (
    MAX_QUERY_CHARS,
    PAGE_MAX,
    checked_budget,
    query_errors,
)
from hybridsag.errors import ConfigError, InputError, NotFoundError
from hybridsag.ingest.progress import IngestProgress, as_progress
from hybridsag.output.budget import DEFAULT_BUDGET
from hybridsag.paths.query import validate_query
from hybridsag.request import FeedbackOptions, FolderOptions, ListingOptions, SearchOptions, options_of
from hybridsag.results import SearchResponse

if TYPE_CHECKING:
    from hybridsag.client import AsyncServiceClient, ServiceClient

__all__ = ["RemoteBackend"]


def _detail(resource: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /v1/resources/{id}`` as :meth:`LocalBackend.show` gives it: the chunks summarised
    (their text's length as ``chars``)."""
    out = {k: v for k, v in resource.items() if k != "chunks"}
    out["chunks"] = [
        {
            "chunk_id": c["chunk_id"],
            "ordinal": c["ordinal"],
            "heading_path": c["heading_path"],
            "start_line": c["start_line"],
            "end_line": c["end_line"],
            "chars": len(c["text"]),
        }
        for c in resource["chunks"]
    ]
    return out


class RemoteBackend:
    """The operations of a running ``hybridsag serve`` at ``url`` with a bearer ``token``: what
    the token's role allows (a read token searches and reads; writes need ``write``, reconcile
    and audit ``admin``), scoped to its tenant for a tenant-scoped token, whatever a call's
    filters or tenant say. ``batch_size``: resources per request of :meth:`ingest_jsonl`;
    ``token_source``: where the token came from, as a refused token's AuthError names it
    (None: the CLI's setting, :data:`hybridsag.client.CLI_TOKEN_SOURCE`)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout_s: float = 120.0,
        batch_size: int = 256,
        token_source: str | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"url must be an http:// or https:// URL, got {url!r}")
        self.url = url.rstrip("/")
        self._token = token
        self._token_source = token_source
        self.timeout_s = timeout_s
        self.batch_size = batch_size

    def client(self) -> ServiceClient:
        """A new sync client of the service (the caller closes it)."""
        from hybridsag.client import CLI_TOKEN_SOURCE, ServiceClient

        return ServiceClient(
            self.url, token=self._token, timeout=self.timeout_s,
            token_source=self._token_source or CLI_TOKEN_SOURCE,
        )  # fmt: skip

    def _async_client(self) -> AsyncServiceClient:
        """A new async client of the service, on the running event loop (the caller closes
        it)."""
        from hybridsag.client import CLI_TOKEN_SOURCE, AsyncServiceClient

        return AsyncServiceClient(
            self.url, token=self._token, timeout=self.timeout_s,
            token_source=self._token_source or CLI_TOKEN_SOURCE,
        )  # fmt: skip

    def close(self) -> None:
        """Nothing to close: every call opens and closes its own client."""

    def __enter__(self) -> RemoteBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- search ----------------------------------------------------------------------------------

    @staticmethod
    def _check(query: str) -> str:
        """The checks of ``validate_query`` that need no setting (blank, control characters),
        made here so the message is hybridsag's own; the length limit is the service's."""
        with query_errors():
            return validate_query(query, max_chars=MAX_QUERY_CHARS)

    def check_paths(self, paths: Sequence[str] | None) -> None:
        """Nothing to check before a search: the service knows its own paths and refuses an
        unknown one on each search (QueryValueError there)."""

    def warm(self, paths: Sequence[str] | None = None, *, query: str = "") -> dict[str, float]:
        """Nothing to build here: the service is warm (no steps, so ``{}``)."""
        return {}

    def query_terms(self, query: str) -> list[str]:
        """None: the service does not say its terms, so snippets are not highlighted."""
        return []

    def search(self, query: str, options: SearchOptions) -> SearchResponse:
        """``POST /v1/search``: the service's JSON read into the typed response."""
        with query_errors(), self.client() as client:
            data = client.search(self._check(query), options)
        return SearchResponse.from_dict(data)

    async def asearch(self, query: str, options: SearchOptions) -> SearchResponse:
        """``POST /v1/search`` over ``httpx.AsyncClient`` on the running event loop."""
        with query_errors():
            async with self._async_client() as client:
                data = await client.search(self._check(query), options)
        return SearchResponse.from_dict(data)

    def search_agent(self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET) -> str:
        with query_errors(), self.client() as client:
            return client.search_agent(self._check(query), options, budget=checked_budget(budget))

    async def asearch_agent(
        self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET
    ) -> str:
        with query_errors():
            async with self._async_client() as client:
                return await client.search_agent(
                    self._check(query), options, budget=checked_budget(budget)
                )

    # -- writes ----------------------------------------------------------------------------------

    def ingest(
        self, resources: Sequence[Mapping[str, Any]], *, mode: str | None = None
    ) -> dict[str, Any]:
        """``POST /v1/resources``: one bad entry refuses the batch (InputError naming it); a
        read token is refused (ForbiddenError). Returns the ingest report."""
        with self.client() as client:
            return client.ingest(list(resources), mode=mode)

    def ingest_jsonl(
        self, path: Path, *, mode: str | None = None, progress: IngestProgress | None = None
    ) -> dict[str, Any]:
        """The JSONL file in batches of ``batch_size``; bad lines are reported by
        ``file:line`` as in process, the rest is ingested."""
        ticks = as_progress(progress)
        path = Path(path)
        if progress is not None and path.is_file():
            with path.open("rb") as fh:
                ticks.start(sum(1 for line in fh if line.strip()))
        with self.client() as client:
            return client.ingest_jsonl(
                path,
                mode=mode,
                batch_size=self.batch_size,
                progress=lambda n: ticks.prepared(n, 0),
            )

    def sync_folder(
        self,
        path: Path,
        options: FolderOptions | None = None,
        *,
        progress: IngestProgress | None = None,
        **keywords: Any,
    ) -> dict[str, Any]:
        """The folder synced through the service (``ServiceClient.sync_folder``): a manifest
        first, then only the files the service does not hold."""
        o = options_of(FolderOptions, options, keywords)
        with self.client() as client:  # tenant "": the token's own (an admin's: "")
            return client.sync_folder(
                Path(path), tenant=o.tenant or None, acl=o.acl, prune=o.prune, progress=progress
            )

    def delete(self, resource_id: str, *, tenant: str | None = None) -> bool:
        """``DELETE /v1/resources/{id}``; False when there is none (or none this token sees)."""
        with self.client() as client:
            try:
                return bool(client.delete(resource_id, tenant=tenant)["done"])
            except NotFoundError:
                return False

    def set_enabled(self, resource_id: str, enabled: bool, *, tenant: str | None = None) -> bool:
        """``POST /v1/resources/{id}/enable`` or ``/disable``; False when there is none."""
        with self.client() as client:
            try:
                return bool(client.set_enabled(resource_id, enabled, tenant=tenant)["done"])
            except NotFoundError:
                return False

    def exclusions(
        self, *, tenant: str | None = None, resource_id: str | None = None
    ) -> list[dict[str, Any]]:
        """``GET /v1/exclusions``: those the token may see (a tenant-scoped token's own)."""
        with self.client() as client:
            return client.exclusions(tenant=tenant, resource_id=resource_id)

    def include(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``POST /v1/resources/{id}/include``; NotFoundError when that id is not excluded."""
        with self.client() as client:
            return client.include(resource_id, tenant=tenant)

    # -- reads -----------------------------------------------------------------------------------

    def list_resources(
        self, options: ListingOptions | None = None, **keywords: Any
    ) -> list[dict[str, Any]]:
        """``GET /v1/resources``, page after page, up to ``limit``: the resources the token
        may see (a tenant-scoped token's tenant only; for an admin ``tenant`` narrows)."""
        o = options_of(ListingOptions, options, keywords)
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        with self.client() as client:
            while True:
                want = PAGE_MAX if o.limit is None else min(PAGE_MAX, o.limit - len(out))
                page = client.list_resources(replace(o, limit=want), cursor=cursor)
                out.extend(page["resources"])
                cursor = page["next_cursor"]
                if cursor is None or (o.limit is not None and len(out) >= o.limit):
                    return out

    def show(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any] | None:
        """``GET /v1/resources/{id}`` as :meth:`LocalBackend.show` gives it; None when there
        is none (or none this token sees)."""
        with self.client() as client:
            try:
                return _detail(client.resource(resource_id, tenant=tenant))
            except NotFoundError:
                return None

    # -- consistency and health ------------------------------------------------------------------

    def rebuild_vectors(self, *, progress: IngestProgress | None = None) -> dict[str, Any]:
        """Refused (InputError): the service has no such endpoint; it runs where the data dir
        is, with the service stopped."""
        raise InputError(
            f"rebuild-vectors runs in process, on the data dir of the service at {self.url}: "
            "stop the service and run it there without --server"
        )

    def reconcile(self, *, dry_run: bool, force: bool = False) -> dict[str, Any]:
        """``POST /v1/reconcile`` (an admin token): the audit report; ConsistencyError when
        refused."""
        with self.client() as client:
            return client.reconcile(dry_run=dry_run, force=force)

    def audit(self) -> dict[str, Any]:
        """``GET /v1/audit/latest`` (an admin token); NotFoundError when there is no report
        yet."""
        with self.client() as client:
            return client.audit_latest()

    def health(self) -> dict[str, str]:
        """The service's checks: that it answers and its version (``service``), the token's
        name, role and tenant (``token``), and ``/readyz``: each component's check when the
        token may see them (an admin's, or ``server.public_metrics``), else ready or not."""
        return remote_health(self.url, self.client)

    def writes_granted(self) -> bool:
        """Whether the token's role may write (``GET /v1/whoami``: ``write`` or ``admin``)."""
        with self.client() as client:
            return client.whoami()["role"] in ("write", "admin")

    # -- experiments -----------------------------------------------------------------------------

    def experiments(self) -> list[dict[str, Any]]:
        with self.client() as client:
            return client.experiments()

    def experiment(self, name: str) -> dict[str, Any]:
        with self.client() as client:
            return client.experiment(name)

    def define_experiment(self, definition: Mapping[str, Any]) -> dict[str, Any]:
        with self.client() as client:
            return client.define_experiment(definition)

    def set_experiment_active(self, name: str, active: bool) -> dict[str, Any]:
        with self.client() as client:
            return client.set_experiment_active(name, active)

    def experiment_report(self, name: str, *, tenant: str | None = None) -> dict[str, Any]:
        """The report the token may see: its tenant's traffic (a tenant token), every
        tenant's or ``tenant``'s (an admin)."""
        with self.client() as client:
            return client.experiment_report(name, tenant=tenant)

    def keep_experiment_report(self, name: str) -> Path | None:
        """None: a service computes reports on request and writes no file."""
        return None

    def feedback(
        self, query_id: str, options: FeedbackOptions | None = None, *, tenant: str | None = None,
        **keywords: Any,
    ) -> dict[str, Any]:
        """``POST /v1/feedback``; the token decides the scope, so ``tenant`` must be None or
        the token's own (ForbiddenError otherwise is the service's to say)."""
        if tenant is not None:
            raise InputError(
                "feedback through a service is scoped by the token's tenant; leave tenant out"
            )
        o = options_of(FeedbackOptions, options, keywords)
        with self.client() as client:
            return client.feedback(query_id, o)
