"""The resource routes: ingest (``POST /v1/resources``), list and show, delete, enable and
disable, and the folder files kept out of their folder's index (``/v1/exclusions``, ``include``).

Reads run on the search gate, writes on the one writer (:class:`~hybridsag.service.limits.Gate`);
each checks the caller's tenant and ACL tags first (:mod:`hybridsag.service.auth`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from hybridsag.backend import PAGE_MAX, ListingOptions, LocalBackend
from hybridsag.documents import Document
from hybridsag.errors import ForbiddenError, IngestError, InputError, NotFoundError
from hybridsag.records.schema import STATUSES
from hybridsag.service.auth import Principal
from hybridsag.service.limits import NDJSON_TYPES, media_type
from hybridsag.service.models import (
    ExclusionOut,
    IngestOut,
    ResourceIn,
    ResourceOut,
    ResourcePageOut,
    WriteOut,
)
from hybridsag.service.routing import (
    API_PREFIX,
    ERRORS,
    FieldError,
    known_query,
    reader,
    state_of,
    writer,
)

__all__ = [
    "api",
    "exclusions",
    "get_resource",
    "include",
    "ingest",
    "list_resources",
]

api = APIRouter(prefix=API_PREFIX, responses=ERRORS, dependencies=[Depends(known_query)])

_RESOURCES = TypeAdapter(list[ResourceIn])


async def _documents(
    request: Request, caller: Principal, backend: LocalBackend, max_batch: int
) -> list[Document]:
    """The request's resources (a JSON list, or JSONL for ``application/x-ndjson``: lines split
    on ``\\n`` only, as JSON strings may hold U+2028 or U+0085), checked against the caller's
    scope; FieldError naming the entry and field otherwise. (BodyGuard has already refused a
    body of another content type, too large or nested too deeply.)"""
    raw = await request.body()
    kind = media_type(request.headers.get("content-type")) or "application/json"
    try:
        if kind in NDJSON_TYPES:
            lines = raw.decode("utf-8").split("\n")
            items: Any = [json.loads(line) for line in lines if line.strip()]
        elif kind == "application/json":
            items = json.loads(raw.decode("utf-8"))
        else:
            raise FieldError(
                ["header", "content-type"],
                f"content type {kind!r} is not accepted; send application/json (a list of "
                "resources) or application/x-ndjson (one resource a line)",
            )
    except (UnicodeDecodeError, ValueError) as exc:
        raise FieldError(["body"], f"body is not valid JSON/JSONL: {exc}") from None
    try:
        resources = _RESOURCES.validate_python(items)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        ) from None
    if not resources:
        raise FieldError(["body"], "no resources given: send a non-empty list")
    if len(resources) > max_batch:
        raise FieldError(
            ["body"], f"{len(resources)} resources in one request; server.max_batch is {max_batch}"
        )
    checked = []
    for i, r in enumerate(resources):
        tenant = caller.check_tenant(r.tenant, where=f"body[{i}].tenant")
        caller.check_tags(r.acl, where=f"body[{i}].acl")
        checked.append({**r.model_dump(), "tenant": tenant})
    try:
        return backend.documents(checked)
    except IngestError as exc:
        raise FieldError(exc.loc or ["body"], str(exc.__cause__ or exc)) from None


_INGEST_BODY = {
    "requestBody": {
        "required": True,
        "description": "a JSON list of resources, or JSONL (application/x-ndjson), one a line",
        "content": {
            "application/json": {
                "schema": {"type": "array", "minItems": 1, "items": ResourceIn.model_json_schema()}
            }
        },
    }
}


@api.post(
    "/resources",
    response_model=IngestOut,
    tags=["resources"],
    openapi_extra=_INGEST_BODY,
)
async def ingest(
    request: Request, caller: Principal = writer, mode: Literal["sag", "passage"] | None = None
) -> IngestOut:
    """Ingest (or re-ingest) a batch; returns the ingest report. A batch is all or nothing at
    the door: one bad entry refuses the request (422 naming it) before anything is written."""
    state = state_of(request)
    backend = state.ops()
    docs = await _documents(request, caller, backend, state.settings.server.max_batch)

    def run() -> IngestOut:
        # ids are per tenant: a document lands in the caller's own tenant, where another
        # tenant's ids do not exist; only a resource of its own tenant that its ACL tags do
        # not reach is refused (it may not overwrite what it cannot read)
        for i, doc in enumerate(docs):
            existing = backend.record(doc.resource_id, tenant=doc.tenant)
            if existing is not None and not caller.can_see(existing):
                raise ForbiddenError(
                    f"body[{i}]: resource id {doc.resource_id!r} is held by an ACL group "
                    f"token {caller.name!r} is not in",
                    loc=["body", i, "_id"],
                )
        # the shutdown sets state.stopping: a long write stops at its next cancellation point
        report = backend.ingest_documents(docs, mode=mode, cancel=state.stopping)
        return IngestOut(**report)

    return await state.writes.run(run, lane=caller.lane)


#: What a tenant or resource id that names a stored resource never holds: the store's key
#: separator (:data:`hybridsag.records.keys.KEY_SEP`, ``\x1f``), stated in the schema so that a
#: request holding it is a 422 naming its field, not a schema-valid request refused.
_NO_KEY_SEP = r"^[^\x1f]*$"
#: The ``tenant`` query parameter of the ``/resources/{id}`` routes.
_TENANT = Query(
    None,
    max_length=256,
    pattern=_NO_KEY_SEP,
    description="the tenant whose resource `resource_id` is (a resource is (tenant, id): two "
    "tenants may each hold one id). An admin token names it (default \"\", the un-tenanted "
    "resources); a tenant-scoped token addresses its own tenant only (another is 403)",
)
#: The ``resource_id`` path parameter of the ``/resources/{id}`` routes.
_RESOURCE_ID = Path(pattern=_NO_KEY_SEP, description="the resource's id")

#: The ``tenant`` query parameter of the listings (``/resources``, ``/exclusions``).
_LISTED_TENANT = Query(
    None,
    max_length=256,
    description="only this tenant's (an admin's choice; default: every tenant's). A "
    "tenant-scoped token lists its own tenant's only (another is 403)",
)


def _tenant_of(caller: Principal, tenant: str | None) -> str:
    """The tenant a ``/resources/{id}`` call addresses (see :data:`_TENANT`)."""
    return caller.check_tenant(tenant, where="query.tenant")


def _visible(backend: LocalBackend, caller: Principal, resource_id: str, tenant: str) -> None:
    record = backend.record(resource_id, tenant=tenant)
    if record is None or not caller.can_see(record):
        raise NotFoundError(f"no resource {resource_id!r}")


@api.get("/resources", response_model=ResourcePageOut, tags=["resources"])
async def list_resources(
    request: Request,
    caller: Principal = reader,
    tenant: str | None = _LISTED_TENANT,
    status: Literal[STATUSES] | None = Query(  # type: ignore[valid-type]
        None, description="only resources in this status (a read token sees `ready` ones only)"
    ),
    prefix: str | None = Query(None, max_length=1024, description="only ids starting with this"),
    limit: int = Query(PAGE_MAX, ge=1, le=PAGE_MAX, description="at most this many on the page"),
    cursor: str | None = Query(
        None, pattern=r"^[0-9]{1,18}$", description="`next_cursor` of the previous page"
    ),
) -> Any:
    """Resources, oldest first, a page at a time, as ``hybridsag list --json`` shows them; a
    tenant-scoped token sees only its own tenant's, those its ACL tags reach, in the statuses
    its role sees (``next_cursor`` is None after the last page)."""
    state = state_of(request)
    backend = state.ops()
    acl: tuple[str, ...] | None = None
    if caller.scoped:
        tenant = caller.check_tenant(tenant, where="query.tenant")
        acl = caller.acl
    if status is not None and not caller.sees_status(status):
        raise ForbiddenError(
            f"status={status!r}: token {caller.name!r} (role {caller.role!r}) cannot see "
            f"{status} resources"
        )
    statuses = (status,) if status else tuple(x for x in STATUSES if caller.sees_status(x))
    if statuses == STATUSES:
        statuses = ()

    def run() -> dict[str, Any]:
        try:
            return backend.list_page(
                ListingOptions(tenant=tenant, prefix=prefix, limit=limit),
                statuses=statuses or None, acl=acl, cursor=cursor,
            )  # fmt: skip
        except InputError as exc:
            raise FieldError(["query", "cursor"], str(exc)) from None

    return await state.searches.run(
        run, timeout=state.settings.server.search_timeout_s, lane=caller.lane
    )


@api.get("/resources/{resource_id:path}", response_model=ResourceOut, tags=["resources"])
async def get_resource(
    request: Request,
    resource_id: str = _RESOURCE_ID,
    caller: Principal = reader,
    tenant: str | None = _TENANT,
) -> Any:
    """A resource's record, whether its source file is stale, and its current chunks (404 when
    missing or out of scope)."""
    state = state_of(request)
    backend = state.ops()
    scope = _tenant_of(caller, tenant)

    def run() -> ResourceOut:
        _visible(backend, caller, resource_id, scope)
        detail = backend.show(resource_id, tenant=scope)
        if detail is None:
            raise NotFoundError(f"no resource {resource_id!r}")
        return ResourceOut.of(detail, backend.chunks(resource_id, tenant=scope))

    return await state.searches.run(
        run, timeout=state.settings.server.search_timeout_s, lane=caller.lane
    )


def _write_route(action: str, call: Callable[..., bool]) -> Callable[..., Any]:
    async def handler(
        request: Request,
        resource_id: str = _RESOURCE_ID,
        caller: Principal = writer,
        tenant: str | None = _TENANT,
    ) -> WriteOut:
        state = state_of(request)
        backend = state.ops()
        scope = _tenant_of(caller, tenant)

        def run() -> WriteOut:
            _visible(backend, caller, resource_id, scope)
            if not call(backend, resource_id, tenant=scope):
                raise NotFoundError(f"no resource {resource_id!r}")
            return WriteOut(resource_id=resource_id, done=True, action=action)  # type: ignore[arg-type]

        return await state.writes.run(run, lane=caller.lane)

    return handler


def _disable(backend: LocalBackend, resource_id: str, *, tenant: str) -> bool:
    return backend.set_enabled(resource_id, False, tenant=tenant)


def _enable(backend: LocalBackend, resource_id: str, *, tenant: str) -> bool:
    return backend.set_enabled(resource_id, True, tenant=tenant)


for _suffix, _method, _action, _call, _summary in (
    ("/disable", "POST", "disabled", _disable, "Disable a resource (hidden, kept)"),
    ("/enable", "POST", "enabled", _enable, "Enable a disabled resource"),
    ("", "DELETE", "deleted", LocalBackend.delete, "Delete a resource on every path"),
):
    api.add_api_route(
        "/resources/{resource_id:path}" + _suffix,
        _write_route(_action, _call),
        methods=[_method],
        response_model=WriteOut,
        tags=["resources"],
        summary=_summary,
    )


@api.post("/resources/{resource_id:path}/include", response_model=IngestOut, tags=["resources"])
async def include(
    request: Request,
    resource_id: str = _RESOURCE_ID,
    caller: Principal = writer,
    tenant: str | None = _TENANT,
) -> IngestOut:
    """Lift the exclusion a delete left on a folder file that stayed on disk, and index the
    file again with the ACL it had (404 when that id is not excluded, or out of scope)."""
    state = state_of(request)
    backend = state.ops()
    scope = _tenant_of(caller, tenant)

    def run() -> IngestOut:
        if not any(caller.can_see_tags(x["acl"]) for x in backend.exclusions(
            tenant=scope, resource_id=resource_id
        )):
            raise NotFoundError(f"no excluded file {resource_id!r}")
        return IngestOut(**backend.include(resource_id, tenant=scope))

    return await state.writes.run(run, lane=caller.lane)


@api.get("/exclusions", response_model=list[ExclusionOut], tags=["resources"])
async def exclusions(
    request: Request,
    caller: Principal = reader,
    tenant: str | None = _LISTED_TENANT,
    resource_id: str | None = Query(None, max_length=1024, description="only this id"),
) -> Any:
    """The folder files deleted while they stayed on disk and kept out of their folder's
    index until ``hybridsag include`` (``POST /v1/resources/{id}/include``) lifts them; a
    tenant-scoped token sees its own tenant's, those its ACL tags reach."""
    state = state_of(request)
    backend = state.ops()
    if caller.scoped:
        tenant = caller.check_tenant(tenant, where="query.tenant")

    def run() -> list[dict[str, Any]]:
        rows = backend.exclusions(tenant=tenant, resource_id=resource_id)
        return [x for x in rows if caller.can_see_tags(x["acl"])]

    return await state.searches.run(
        run, timeout=state.settings.server.search_timeout_s, lane=caller.lane
    )

