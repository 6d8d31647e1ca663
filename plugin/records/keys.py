"""Resource and chunk identity (see :mod:`hybridsag.records.store` for the whole story): a
resource's *key* (:func:`resource_key`: its id in the un-tenanted namespace ``""``, else
``tenant + KEY_SEP + id``, split again by :func:`split_key`), the printable chunk ids shown to
users (:func:`chunk_id_for`) and the SQL of a resources row's public id (:func:`public_id_sql`).
"""

from __future__ import annotations

from hybridsag.errors import InputError

__all__ = [
    "KEY_SEP",
    "chunk_id_for",
    "chunk_id_suffix",
    "public_id_sql",
    "resource_key",
    "split_key",
]

#: Between the tenant and the id in a resource key (see the module docstring): U+001F, a
#: control character, which no tenant and no id may hold.
KEY_SEP = "\x1f"
#: What a tenant's characters become in its chunk ids (``%`` first, so the escape is reversible).
_CHUNK_ID_ESCAPES = (("%", "%25"), ("@", "%40"), ("#", "%23"))


def resource_key(resource_id: str, tenant: str = "") -> str:
    """The key the store keys a resource by: ``resource_id`` in tenant ``""``, else
    ``tenant + KEY_SEP + resource_id``. Example: ``resource_key("notes", "acme")`` ->
    ``"acme\\x1fnotes"``; ``resource_key("notes")`` -> ``"notes"``. InputError for an id or a
    tenant holding :data:`KEY_SEP` (no stored one does: such a key could name another
    tenant's resource)."""
    if KEY_SEP in resource_id or KEY_SEP in tenant:
        what = "resource id" if KEY_SEP in resource_id else "tenant"
        value = resource_id if KEY_SEP in resource_id else tenant
        raise InputError(f"{what} {value!r:.80} holds control character {KEY_SEP!r}")
    return f"{tenant}{KEY_SEP}{resource_id}" if tenant else resource_id


def split_key(key: str) -> tuple[str, str]:
    """``(tenant, resource_id)`` of a resource key (:func:`resource_key` undone)."""
    tenant, sep, resource_id = key.partition(KEY_SEP)
    return (tenant, resource_id) if sep else ("", key)


def chunk_id_suffix(tenant: str) -> str:
    """What a chunk id of ``tenant`` ends with after its ordinal: ``""`` for tenant ``""``,
    else ``@`` and the tenant with ``%``, ``@`` and ``#`` percent-escaped."""
    for char, escaped in _CHUNK_ID_ESCAPES:
        tenant = tenant.replace(char, escaped)
    return f"@{tenant}" if tenant else ""


def chunk_id_for(key: str, version: int, ordinal: int) -> str:
    """The id of chunk ``ordinal`` of version ``version`` of the resource ``key``:
    ``<id>@<version>#<ordinal>`` in tenant ``""``, ``<id>@<version>#<ordinal>@<tenant>``
    otherwise (see the module docstring). Chunk ids carry the version, so a stale vector can
    never pass for a current one. Example: ``chunk_id_for(resource_key("a@b", "t#1"), 2, 0)``
    -> ``"a@b@2#0@t%231"``."""
    tenant, resource_id = split_key(key)
    return f"{resource_id}@{version}#{ordinal}{chunk_id_suffix(tenant)}"


def public_id_sql(alias: str) -> str:
    """The SQL of the public id of the resources row aliased ``alias`` (its key without the
    tenant; the same text in SQLite and PostgreSQL)."""
    return (
        f"(CASE WHEN {alias}.tenant = '' THEN {alias}.resource_id "
        f"ELSE substr({alias}.resource_id, length({alias}.tenant) + 2) END)"
    )
