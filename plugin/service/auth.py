"""Bearer tokens, roles and tenant scope of the HTTP service.

A :class:`TokenBook` is built once from ``server.token`` (one admin token) and ``server.tokens``
(each with a role, and for ``read``/``write`` a tenant and ACL tags). :meth:`TokenBook.principal`
turns an ``Authorization: Bearer`` value into a :class:`Principal` or raises
:class:`~hybridsag.errors.AuthError` (401); :meth:`Principal.require` raises
:class:`~hybridsag.errors.ForbiddenError` (403) for a role it lacks.

Deny by default: a tenant-scoped principal's searches always carry its tenant and ACL tags
(:meth:`Principal.scope_filters`); it may narrow them but never widen them, and it can read,
write or delete only resources it could find (:meth:`Principal.can_see`). A read token sees only
``ready`` resources (:data:`READ_STATUSES`), on every path: its search may not ask for disabled
ones, and ``GET /v1/resources/ID`` of a disabled one is a 404, both through
:meth:`Principal.sees_status`. An admin (or everyone, with ``server.auth = false`` on 127.0.0.1) is
unscoped, as the in-process Python API is.

No message, log line or metric ever holds a token: principals are named by ``TokenSettings.name``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybridsag.errors import AuthError, ForbiddenError
from hybridsag.settings import ROLES, ServerSettings
from hybridsag.records.rows import ResourceRecord

__all__ = ["READ_STATUSES", "Principal", "TokenBook"]

#: The resource statuses a read token may see, in search results and resource reads alike: what
#: a default search returns. Write tokens see every status of their tenant (they disable,
#: enable and re-ingest their own resources); admins see everything.
READ_STATUSES = frozenset({"ready"})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a role, and for a tenant-scoped token its tenant and ACL tags."""

    name: str
    role: str
    tenant: str | None = None
    acl: tuple[str, ...] = ()

    @property
    def scoped(self) -> bool:
        """True for a read/write token (bound to one tenant), False for an admin."""
        return self.role != "admin"

    @property
    def lane(self) -> str:
        """The queue this principal's work waits in (:class:`~hybridsag.service.limits.Gate`):
        its tenant's for a tenant-scoped token (every token of a tenant shares it), its own for
        an admin token. Lanes take turns, so one tenant's backlog never stands before another's
        call."""
        return f"tenant {self.tenant!r}" if self.scoped else f"admin {self.name!r}"

    def require(self, role: str) -> Principal:
        """This principal when it holds ``role`` (roles hold the ones before them in
        :data:`~hybridsag.settings.ROLES`); ForbiddenError otherwise."""
        if ROLES.index(self.role) < ROLES.index(role):
            raise ForbiddenError(
                f"token {self.name!r} has role {self.role!r}; this needs {role!r}"
            )
        return self

    def sees_status(self, status: str) -> bool:
        """Whether this principal may see a resource in ``status``: a read token only
        :data:`READ_STATUSES`, every other role any. The one rule behind both
        :meth:`scope_filters` (search) and :meth:`can_see` (resource reads)."""
        return self.role != "read" or status in READ_STATUSES

    def can_see(self, record: ResourceRecord) -> bool:
        """Whether this principal may see ``record`` (read it, or write over it): same tenant,
        no ACL tags or one it holds, and a status it sees (:meth:`sees_status`)."""
        if not self.scoped:
            return True
        return (
            record.tenant == self.tenant
            and self.can_see_tags(record.acl)
            and self.sees_status(record.status)
        )

    def can_see_tags(self, acl: Sequence[str]) -> bool:
        """Whether this principal reaches something tagged ``acl``: no tags (public), or one
        it holds; always for an admin."""
        return not self.scoped or not acl or bool(set(acl) & set(self.acl))

    def scope_filters(self, requested: Mapping[str, Any]) -> dict[str, Any]:
        """Search filters with this principal's tenant and ACL tags forced in.

        A requested ``tenant`` other than the token's, an ACL tag the token lacks, or a status
        it does not see (:meth:`sees_status`: ``disabled`` for a read token) raise
        ForbiddenError; everything else (metadata, resource ids, a subset of its tags) only
        narrows and is kept.
        """
        out = dict(requested)
        if not self.scoped:
            return out
        tenant = out.get("tenant")
        if tenant is not None and tenant != self.tenant:
            raise _forbidden(
                f"filters.tenant={tenant!r}: token {self.name!r} holds tenant {self.tenant!r} only",
                "body.filters.tenant",
            )
        out["tenant"] = self.tenant
        asked = out.get("acl")
        if asked is None:
            out["acl"] = self.acl
        else:
            self.check_tags(asked, where="filters.acl")
        hidden = [s for s in out.get("statuses") or () if not self.sees_status(s)]
        if hidden:
            raise _forbidden(
                f"filters.statuses: token {self.name!r} (role {self.role!r}) cannot see "
                f"{hidden[0]} resources",
                "body.filters.statuses",
            )
        return out

    def check_tags(self, tags: Sequence[str], *, where: str) -> None:
        """ForbiddenError naming the first tag in ``tags`` that a scoped principal lacks."""
        if not self.scoped:
            return
        for tag in tags:
            if tag not in self.acl:
                raise _forbidden(
                    f"{where}: token {self.name!r} does not hold ACL tag {tag!r}",
                    where if where.startswith("body") else f"body.{where}",
                )

    def check_tenant(self, tenant: str | None, *, where: str) -> str:
        """The tenant a write by this principal lands in: its own; ForbiddenError for another."""
        if not self.scoped:
            return tenant or ""
        if tenant is not None and tenant != self.tenant:
            raise _forbidden(
                f"{where}={tenant!r}: token {self.name!r} holds tenant {self.tenant!r} only",
                where,
            )
        return self.tenant or ""


def _forbidden(message: str, where: str) -> ForbiddenError:
    """A ForbiddenError whose ``loc`` names the request field (``body.filters.tenant``)."""
    parts = where.replace("[", ".").replace("]", "").split(".")
    return ForbiddenError(message, loc=[int(p) if p.isdigit() else p for p in parts if p])


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenBook:
    """The service's tokens, looked up by a constant-time comparison of their SHA-256 digests.

    ``auth=False`` (``server.auth = false``) makes every caller an admin named ``anonymous``.
    """

    def __init__(self, server: ServerSettings) -> None:
        self.enabled = server.auth
        self._entries: list[tuple[bytes, Principal]] = []
        if server.token is not None:
            self._entries.append((_digest(server.token.get_secret_value()), Principal("admin", "admin")))
        for i, t in enumerate(server.tokens):
            name = t.name or f"tokens[{i}]"
            self._entries.append(
                (_digest(t.token.get_secret_value()), Principal(name, t.role, t.tenant, tuple(t.acl)))
            )

    def __len__(self) -> int:
        return len(self._entries)

    def principal(self, token: str | None) -> Principal:
        """The principal of a bearer token; AuthError when it is missing or unknown."""
        if not self.enabled:
            return Principal("anonymous", "admin")
        if not token:
            raise AuthError("missing bearer token: send 'Authorization: Bearer <token>'")
        digest = _digest(token)
        found: Principal | None = None
        for known, principal in self._entries:  # every entry compared: no early exit to time
            if hmac.compare_digest(known, digest):
                found = principal
        if found is None:
            raise AuthError("unknown bearer token")
        return found
