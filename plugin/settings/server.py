"""The settings of the HTTP service and its bearer tokens."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from hybridsag.settings.base import Section

__all__ = [
    "LOOPBACK",
    "MIN_TOKEN_CHARS",
    "ROLES",
    "ServerSettings",
    "TokenSettings",
]


#: Roles of the HTTP service's bearer tokens, each holding the ones before it.
ROLES: tuple[str, ...] = ("read", "write", "admin")

#: The only address the service may listen on with ``server.auth = false``.
LOOPBACK = "127.0.0.1"

#: Shortest bearer token accepted (a shorter one is guessable).
MIN_TOKEN_CHARS = 16


class TokenSettings(Section):
    """One bearer token of the HTTP service and what it may do.

    ``role``: ``read`` (search, read resources), ``write`` (also ingest, delete, disable,
    enable) or ``admin`` (everything: all tenants, reconcile, audit, metrics). A ``read`` or
    ``write`` token belongs to one ``tenant`` (``""`` is the tenant of resources ingested without
    one) and holds the ACL tags ``acl``; the service forces both into every search and write it
    makes. ``name`` labels the token in logs (the token itself never appears anywhere).
    """

    #: the bearer token itself, at least :data:`MIN_TOKEN_CHARS` characters
    token: SecretStr
    #: what it may do (each role holds the ones before it: :data:`ROLES`)
    role: Literal["read", "write", "admin"] = "read"
    #: the one tenant a read or write token belongs to (``""``: un-tenanted resources); None
    #: for an admin token
    tenant: str | None = None
    #: the ACL tags it holds (none for an admin token)
    acl: tuple[str, ...] = ()
    #: its label in logs
    name: str = ""

    @model_validator(mode="after")
    def _check(self) -> TokenSettings:
        if len(self.token.get_secret_value()) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"token {self.name or '(unnamed)'!r} is shorter than {MIN_TOKEN_CHARS} characters"
            )
        if self.role == "admin" and (self.tenant is not None or self.acl):
            raise ValueError(
                f"token {self.name or '(unnamed)'!r}: an admin token sees every tenant; "
                "drop its tenant and acl, or give it role 'read' or 'write'"
            )
        if self.role != "admin" and self.tenant is None:
            raise ValueError(
                f"token {self.name or '(unnamed)'!r}: a {self.role!r} token needs a tenant "
                "('' for resources ingested without one)"
            )
        if any(not tag for tag in self.acl):
            raise ValueError(f"token {self.name or '(unnamed)'!r}: empty ACL tag")
        return self


class ServerSettings(Section):
    """The HTTP service (``hybridsag serve``) and the CLI as its client.

    Auth: ``token`` is one admin token (the simple case); ``tokens`` adds tokens with roles,
    tenants and ACL tags. ``auth = false`` serves everyone as admin and is refused unless
    ``host`` is 127.0.0.1. Limits: request bodies over ``max_body_bytes`` get 413; ``top_k``
    over ``max_top_k`` and batches over ``max_batch`` get 422; at most
    ``search_concurrency`` searches run at once and ``search_queue`` wait, the rest get 429 with
    ``Retry-After: retry_after_s``, as do writes beyond ``max_pending_writes``; these bounds
    are per tenant (a tenant token's tenant, or an admin token), whose waiting work runs in
    turn; a search running past ``search_timeout_s`` gets 503. Uploads to convert run
    ``conversions`` at once, outside the writer. Slow clients: headers not complete within
    ``header_timeout_s``, a body that stalls for ``body_timeout_s`` or is not whole within
    ``body_timeout_s`` plus its length over ``min_body_bytes_per_s`` get 408 and are
    disconnected; large bodies held at once are bounded by ``max_body_memory_bytes`` (429). ``/readyz`` runs its deep check at most once per ``ready_cache_s``. On SIGTERM the service stops accepting, finishes the
    requests in flight (up to ``shutdown_timeout_s``) and closes. ``reconciler`` runs the
    ``consistency.cron`` reconcile job inside the service. ``workers`` above 1 serves from that
    many processes sharing the data dir (:mod:`hybridsag.service.workers`): worth it when
    searches queue on one process's CPU (more clients than ``search_concurrency`` keep busy,
    p95 growing with load) and the machine has a free core per extra worker; each worker holds
    its own warm search (its memory), so 1 stays the default. ``url``/``client_token``/
    ``client_timeout_s`` are the CLI's: with ``url`` set, search, index --jsonl, delete,
    reconcile and audit go through the service (``client_token`` defaults to ``token``).
    """

    host: str = LOOPBACK
    port: int = Field(8765, ge=1, le=65535)
    token: SecretStr | None = None
    tokens: tuple[TokenSettings, ...] = ()
    auth: bool = True
    public_metrics: bool = False
    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    max_top_k: int = Field(100, ge=1, le=1000)
    max_batch: int = Field(1000, ge=1, le=100_000)
    search_concurrency: int = Field(4, ge=1, le=256)
    search_queue: int = Field(16, ge=0, le=10_000)
    max_pending_writes: int = Field(16, ge=1, le=10_000)
    retry_after_s: int = Field(1, ge=1, le=3600)
    search_timeout_s: float = Field(30.0, gt=0, le=3600)
    shutdown_timeout_s: float = Field(30.0, gt=0, le=3600)
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="a request's headers must be complete this many seconds after they start "
        "(or after the connection opens); else 408 and the connection is closed",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="a request body that sends no byte for this many seconds gets 408; and "
        "the whole body must arrive within this many seconds plus its length over "
        "min_body_bytes_per_s",
    )
    min_body_bytes_per_s: int = Field(
        65_536,
        ge=1,
        le=1024 * 1024 * 1024,
        description="the slowest a request body may arrive on average: its deadline is "
        "body_timeout_s plus its length over this (a 10 MiB body: 30 + 160 s); later: 408",
    )
    max_body_memory_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1024,
        le=64 * 1024 * 1024 * 1024,
        description="request bodies over 64 KiB the service holds at once, in bytes (each "
        "from its first byte until its request is answered); one that does not fit gets 429",
    )
    conversions: int = Field(
        2,
        ge=1,
        le=64,
        description="folder-sync uploads of PDF, DOCX, HTML or EPUB converted at once (each "
        "in a bounded process of its own, formats.*), outside the writer; tenants take turns",
    )
    ready_cache_s: float = Field(
        5.0,
        ge=0,
        le=3600,
        description="/readyz runs its deep check (store, Milvus, one embedding) at most once "
        "this often and answers from the last result in between",
    )
    reconciler: bool = True
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="worker processes serving one data dir (1: one process, as before); see "
        "docs/operations/service.md for when to raise it",
    )
    worker_timeout_s: float = Field(
        60.0,
        ge=1,
        le=3600,
        description="with workers above 1: a worker whose event loop gives no heartbeat for "
        "this many seconds is hung; it is killed and replaced",
    )
    url: str | None = None
    client_token: SecretStr | None = None
    client_timeout_s: float = Field(120.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _check(self) -> ServerSettings:
        if not self.auth and self.host != LOOPBACK:
            raise ValueError(
                f"server.auth = false is allowed only with server.host = {LOOPBACK!r}, "
                f"got {self.host!r}: set server.token or server.tokens"
            )
        secrets = [t.token.get_secret_value() for t in self.tokens]
        if self.token is not None:
            if len(self.token.get_secret_value()) < MIN_TOKEN_CHARS:
                raise ValueError(f"server.token is shorter than {MIN_TOKEN_CHARS} characters")
            secrets.append(self.token.get_secret_value())
        if len(set(secrets)) != len(secrets):
            raise ValueError("server.tokens: the same token is given twice")
        if self.max_body_memory_bytes < self.max_body_bytes:
            raise ValueError(
                f"server.max_body_memory_bytes={self.max_body_memory_bytes} is below "
                f"server.max_body_bytes={self.max_body_bytes}: a body of the largest size "
                "could never be taken; raise it (or lower max_body_bytes)"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"server.url={self.url!r} must start with http:// or https://")
        return self
