"""The service's folder sync routes (``/v1/sync``), what ``hybridsag --server URL index DIR``
calls (:meth:`hybridsag.client.ServiceClient.sync_folder`); a write token's.

1. ``POST /v1/sync`` with the folder's manifest: which files the service needs, which are
   unchanged, which it will not take and why, what it holds that the manifest does not name.
2. ``PUT /v1/sync/files?root=&path=&sha256=&tenant=&acl=`` with one file's raw bytes as
   ``application/octet-stream`` (the one body of the API that is not JSON: the edge's
   :class:`~hybridsag.service.limits.BodyGuard` takes it on this route only, within
   ``server.max_body_bytes``): checked against its SHA-256 and indexed as an in-process index
   of the folder indexes it.
3. ``POST /v1/sync/commit`` with the paths the folder still holds: prunes the others.

Handlers hold no logic: they check the caller's role, tenant and ACL tags and run the step
(:mod:`hybridsag.ingest.manifest`, through the service's :class:`~hybridsag.backend.LocalBackend`)
on the service's gates (:class:`~hybridsag.service.limits.Gate`), each in the caller's lane (tenants
take turns): a manifest's comparison reads the records on the manifest gate, never the writer;
an upload is made into its document (converted in its bounded process) on the conversion gate,
then applied on the write gate (one writer: the apply and the commit are serialised with every
other write of the service). A tenant-scoped token syncs into its own tenant, and never
replaces or prunes a resource whose ACL tags it does not hold.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter, ValidationError

from hybridsag.errors import InputError
from hybridsag.ingest.manifest import MAX_MANIFEST_FILES, ManifestEntry
from hybridsag.service.auth import Principal
from hybridsag.service.models import (
    IngestOut,
    ManifestFileIn,
    inline_schema,
    Sha256,
    SyncCommitIn,
    SyncIn,
    SyncOut,
    SyncPath,
    SyncRoot,
    Tag,
)

__all__ = ["UPLOAD_PATH", "build_router"]

#: The route whose body is a file's raw bytes (``application/octet-stream``).
UPLOAD_PATH = "/sync/files"

_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "description": "the file's raw bytes (at most server.max_body_bytes)",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


_SYNC_IN = TypeAdapter(SyncIn)
#: ``POST /v1/sync``'s body in the schema (the handler parses it itself, off the event loop).
_MANIFEST_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": inline_schema(SyncIn.model_json_schema())}},
    }
}


_FILES = TypeAdapter(list[ManifestFileIn])
#: Manifest entries validated in one go: pydantic holds Python's lock for a whole call, and a
#: call over 50,000 entries takes seconds on a loaded machine, in which no other thread of the
#: service runs; slices of this many let them run in between.
_SLICE = 500


def _manifest(raw: bytes) -> SyncIn:
    """The manifest of a ``POST /v1/sync`` body, its files validated :data:`_SLICE` at a time;
    RequestValidationError (422) as FastAPI would raise for the body it parsed."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body", getattr(exc, "pos", 0)),
              "msg": f"JSON decode error: {exc}"}]
        ) from None  # fmt: skip
    files = data.get("files") if isinstance(data, dict) else None
    if isinstance(files, list) and len(files) <= MAX_MANIFEST_FILES:
        checked: list[ManifestFileIn] = []
        for start in range(0, len(files), _SLICE):
            try:
                checked += _FILES.validate_python(files[start : start + _SLICE])
            except ValidationError as exc:
                raise RequestValidationError(
                    [{**e, "loc": ("body", "files", start + e["loc"][0], *e["loc"][1:])}
                     for e in exc.errors(include_url=False)]
                ) from None  # fmt: skip
        data = {**data, "files": checked}  # the model takes the checked entries as they are
    try:
        return _SYNC_IN.validate_python(data)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        ) from None


def build_router(*, prefix: str, writer: Any, known_query: Any, responses: Any) -> APIRouter:
    """The sync routes under ``prefix``, each needing ``writer`` (the write-role dependency)
    and refusing unknown query parameters (``known_query``)."""
    router = APIRouter(
        prefix=prefix, tags=["sync"], responses=responses, dependencies=[known_query]
    )

    @router.post("/sync", response_model=SyncOut, openapi_extra=_MANIFEST_BODY)
    async def sync_need(request: Request, caller: Principal = writer) -> Any:
        """Step 1: the files of the manifest whose bytes the service needs (it writes
        nothing). Every entry whose SHA-256 differs from the one recorded for its resource is
        needed, so a sync that stopped half way asks again and sends the rest."""
        state = request.app.state.service
        raw = await request.body()  # read whole by the edge (BodyGuard) already
        backend = state.ops()
        limit = state.settings.server.max_body_bytes

        def run() -> JSONResponse:
            body = _manifest(raw)
            tenant = caller.check_tenant(body.tenant, where="body.tenant")
            caller.check_tags(body.acl, where="body.acl")
            files = [ManifestEntry(f.path, f.size, f.mtime_ns, f.sha256) for f in body.files]
            need = backend.sync_need(
                body.root, files, tenant=tenant, acl=body.acl, max_upload_bytes=limit,
                visible=caller.can_see,
            )
            return JSONResponse(SyncOut(**need).model_dump(mode="json"))

        # parsed, validated, compared with the records and its answer rendered on the
        # manifest gate, one at a time, in the caller's lane: never on the event loop (a
        # 50,000-entry manifest is seconds of work) nor on the writer (it writes nothing)
        return await state.manifests.run(run, lane=caller.lane)

    @router.put(UPLOAD_PATH, response_model=IngestOut, openapi_extra=_UPLOAD_BODY)
    async def sync_upload(
        request: Request,
        root: Annotated[SyncRoot, Query(description="the folder, as in the manifest")],
        path: Annotated[SyncPath, Query(description="the file, relative to root")],
        sha256: Annotated[Sha256, Query(description="SHA-256 of the body")],
        tenant: Annotated[
            str | None,
            Query(max_length=256, pattern=r"^[^\x00-\x1f\x7f-\x9f]*$", description="as in the manifest"),
        ] = None,
        acl: Annotated[list[Tag], Query(max_length=256, description="ACL tags, as in the manifest")] = [],  # noqa: B006
        caller: Principal = writer,
    ) -> IngestOut:
        """Step 2: one needed file's bytes; indexed as an in-process folder index would
        (same id, title and chunks). A file that cannot be decoded or converted, or is over
        a size limit, is reported in ``errors``; bytes whose SHA-256 is not ``sha256`` get
        422."""
        state = request.app.state.service
        scope = caller.check_tenant(tenant, where="query.tenant")
        caller.check_tags(acl, where="query.acl")
        data = await request.body()
        backend = state.ops()

        def prepare() -> Any:
            try:
                return backend.prepare_upload(
                    root, path, data, sha256=sha256, tenant=scope, acl=acl,
                    visible=caller.can_see, cancel=state.stopping,
                )
            except InputError as exc:
                raise InputError(str(exc), loc=["body"]) from None

        # made into its document (a PDF, DOCX, HTML or EPUB converted in its bounded process)
        # without the writer, which only applies it
        prepared = await state.conversions.run(prepare, lane=caller.lane)
        del data

        def apply() -> IngestOut:
            report = backend.apply_upload(prepared, visible=caller.can_see, cancel=state.stopping)
            return IngestOut(**report)

        return await state.writes.run(apply, lane=caller.lane)

    @router.post("/sync/commit", response_model=IngestOut)
    async def sync_commit(body: SyncCommitIn, request: Request, caller: Principal = writer) -> Any:
        """Step 3: with ``prune``, delete the folder's resources that ``paths`` does not name
        (none when ``paths`` is empty: an unmounted disk looks empty); the report lists them
        in ``pruned``."""
        state = request.app.state.service
        tenant = caller.check_tenant(body.tenant, where="body.tenant")
        backend = state.ops()

        def run() -> IngestOut:
            report = backend.sync_commit(
                body.root, body.paths, tenant=tenant, prune=body.prune, visible=caller.can_see
            )
            return IngestOut(**report)

        return await state.writes.run(run, lane=caller.lane)

    return router
