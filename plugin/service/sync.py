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
(:mod:`hybridsag.ingest.manifest`, through the service's :class:`~hybridsag.backend.LocalBackend`) on the service's
write :class:`~hybridsag.service.limits.Gate` (one writer: every step is serialised with every
other write of the service). A tenant-scoped token syncs into its own tenant, and never
replaces or prunes a resource whose ACL tags it does not hold.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from hybridsag.errors import InputError
from hybridsag.ingest.manifest import ManifestEntry
from hybridsag.service.auth import Principal
from hybridsag.service.models import (
    IngestOut,
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


def _field_error(loc: list[str | int], exc: InputError) -> InputError:
    error = InputError(str(exc))
    error.loc = loc  # type: ignore[attr-defined]
    return error


def build_router(*, prefix: str, writer: Any, known_query: Any, responses: Any) -> APIRouter:
    """The sync routes under ``prefix``, each needing ``writer`` (the write-role dependency)
    and refusing unknown query parameters (``known_query``)."""
    router = APIRouter(
        prefix=prefix, tags=["sync"], responses=responses, dependencies=[known_query]
    )

    @router.post("/sync", response_model=SyncOut)
    async def sync_need(body: SyncIn, request: Request, caller: Principal = writer) -> Any:
        """Step 1: the files of the manifest whose bytes the service needs (it writes
        nothing). Every entry whose SHA-256 differs from the one recorded for its resource is
        needed, so a sync that stopped half way asks again and sends the rest."""
        state = request.app.state.service
        tenant = caller.check_tenant(body.tenant, where="body.tenant")
        caller.check_tags(body.acl, where="body.acl")
        backend = state.ops()
        files = [ManifestEntry(f.path, f.size, f.mtime_ns, f.sha256) for f in body.files]
        limit = state.settings.server.max_body_bytes

        def run() -> SyncOut:
            need = backend.sync_need(
                body.root, files, tenant=tenant, acl=body.acl, max_upload_bytes=limit,
                visible=caller.can_see,
            )
            return SyncOut(**need)

        return await state.writes.run(run)

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
                raise _field_error(["body"], exc) from None

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
