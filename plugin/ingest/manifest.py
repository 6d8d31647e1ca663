"""Folder sync by manifest: the service's side of ``hybridsag --server URL index DIR``.

A client (:meth:`hybridsag.client.ServiceClient.sync_folder`) scans a folder on its own disk
with the rules of an in-process folder index (:func:`hybridsag.ingest.sources.scan_folder`) and syncs
it in three steps, each served by :mod:`hybridsag.service.sync` through the service's one
writer:

1. :func:`sync_need`: the client sends the manifest (each file's path relative to the folder,
   size, mtime and the SHA-256 of its bytes); the answer names the files whose bytes the
   service does not hold (``need``), counts the ``unchanged`` ones, reports the files it will
   not take (over a size limit, an id another file holds: ``errors``, as an in-process index
   reports them) and lists the resources it holds under the folder that the manifest does not
   name (``held``: what the commit may prune).
2. :func:`prepare_upload`, then :func:`apply_upload`: the client sends each needed file's
   bytes with their SHA-256; the service makes the document with the code an in-process index
   uses (:func:`hybridsag.ingest.sources.file_document`: the same id, title, text and chunks;
   a converted format in its bounded process), without the writer, then the writer checks
   again what may have changed meanwhile and ingests it.
3. :func:`sync_commit`: the client sends the paths its folder still holds (the manifest's, and
   those of ``held`` that still exist on its disk, even if now ignored: an in-process index
   keeps those too); the service prunes the folder's resources that none of them names, never
   when there is none (an unmounted disk looks empty).

Nothing is kept between the steps: "need" is every manifest entry whose bytes' hash differs
from the ``source_sha256`` recorded for its resource, so a sync that stopped half way simply
asks again and sends the rest (resumable by construction), and an unchanged folder costs the
manifest and the commit.

**Ids.** As in-process (:mod:`hybridsag.ingest.folders`): a file's id is its path relative to the
innermost folder of that tenant indexed (or synced) before that holds it, else to the folder
named (``root``, the client's absolute path, a label on the service). The resource records
``root`` as ``source_root`` and the client's path as ``source_uri`` (so an agent on the
client's machine can open it), and **no stat**: the service never touches a client's path on
its own disk, so a synced resource is never stale by the service's disk (its freshness is the
next sync), the reconciler's source checks pass it by, and an in-process index never prunes it
(:func:`hybridsag.ingest.folders.source_gone`). A file is in one tenant (the caller's) with the ACL
tags of the sync; a resource the caller may not see (``visible``) is reported, never replaced
nor pruned.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from hybridsag.documents import (
    MAX_SOURCE_URI_CHARS,
    Document,
    IngestReport,
    make_document,
    printable,
)
from hybridsag.errors import ConfigError, ForbiddenError, IngestError, InputError
from hybridsag.ingest.folders import (
    PRUNABLE,
    FolderPlan,
    plan_folder,
    prune_gone,
    taken_by,
    without_excluded,
)
from hybridsag.ingest.formats import CONVERTED_SUFFIXES, DocumentConverter
from hybridsag.settings import Settings
from hybridsag.ingest.sources import (
    FOLDER_SUFFIXES,
    FolderScan,
    check_size,
    file_document,
    file_limit,
    not_indexed,
)
from hybridsag.records.keys import resource_key
from hybridsag.records.rows import ResourceRecord
from hybridsag.records.store import Store
from hybridsag.ingest.writer import Writer

__all__ = [
    "MAX_MANIFEST_FILES",
    "PATH_PATTERN",
    "ROOT_PATTERN",
    "ManifestEntry",
    "SyncNeed",
    "check_rel",
    "check_root",
    "PreparedUpload",
    "apply_upload",
    "check_sha256",
    "prepare_upload",
    "sync_commit",
    "sync_need",
]

_MIB = 1024 * 1024
#: Most files one manifest may name (the request body's size bounds it first by default:
#: ``server.max_body_bytes`` of 10 MiB holds about 60,000 entries).
MAX_MANIFEST_FILES = 1_000_000
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _any_case(suffix: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in suffix)


_C = r"\x00-\x1f\x7f-\x9f"
#: What :func:`check_root` accepts, as a pattern (for the service's schema): ``/`` and a part
#: that is not ``.`` nor ``..``, one or more times.
ROOT_PATTERN = rf"^(?:/(?:[^/.{_C}][^/{_C}]*|\.[^/.{_C}][^/{_C}]*|\.\.[^/{_C}]+))+$"
#: What :func:`check_rel` accepts, as a pattern: parts that are not hidden, the last with a
#: suffix a folder index reads (in any case).
PATH_PATTERN = (
    rf"^(?:[^/.{_C}][^/{_C}]*/)*[^/.{_C}][^/{_C}]*\.(?:"
    + "|".join(_any_case(s.lstrip(".")) for s in sorted({*FOLDER_SUFFIXES, *CONVERTED_SUFFIXES}))
    + ")$"
)

#: Whether the caller may see (and so replace or prune) a stored resource.
Visible = Callable[[ResourceRecord], bool]


def _no_control(what: str, value: str) -> None:
    bad = _CONTROL.search(value)
    if bad:
        raise InputError(f"{what} {value!r:.200} holds control character {bad.group()!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{what} {value!r:.200} is not valid UTF-8") from None


def check_root(root: str) -> str:
    """``root`` when it is a folder a manifest may name: an absolute, normalised POSIX path
    (no ``.`` or ``..`` part, no empty part, no trailing ``/``, not ``/`` itself) of at most
    :data:`~hybridsag.documents.MAX_SOURCE_URI_CHARS` characters; InputError naming it
    otherwise."""
    _no_control("root", root)
    if len(root) > MAX_SOURCE_URI_CHARS:
        raise InputError(f"root is {len(root)} characters, the limit is {MAX_SOURCE_URI_CHARS}")
    parts = root.split("/")
    if not root.startswith("/") or root == "/" or any(p in ("", ".", "..") for p in parts[1:]):
        raise InputError(
            f"root {root!r:.200} must be an absolute, normalised folder path such as "
            "/home/me/docs (no ., .., // or trailing /; not / itself)"
        )
    return root


def check_rel(path: str) -> str:
    """``path`` when a manifest may name it: a relative POSIX path of a file that a folder scan
    lists (no empty, ``.`` or ``..`` part, no hidden part, a known suffix); InputError naming
    it otherwise."""
    _no_control("path", path)
    if len(path) > MAX_SOURCE_URI_CHARS:
        raise InputError(f"path is {len(path)} characters, the limit is {MAX_SOURCE_URI_CHARS}")
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise InputError(
            f"path {path!r:.200} must be relative to the root, as a/b.md (no leading /, no ., "
            ".. or empty part)"
        )
    if any(p.startswith(".") for p in parts):
        raise InputError(f"path {path!r:.200} has a hidden part; a folder index never lists it")
    suffix = PurePosixPath(path).suffix.lower()
    if suffix not in FOLDER_SUFFIXES and suffix not in CONVERTED_SUFFIXES:
        raise InputError(f"path {path!r:.200}: {not_indexed(suffix)}")
    return path


def check_sha256(value: str, *, where: str = "sha256") -> str:
    """``value`` when it is a SHA-256 in hex (64 lower-case digits); InputError otherwise."""
    if not _SHA256.fullmatch(value):
        raise InputError(f"{where} {value!r:.80} is not a SHA-256 (64 lower-case hex digits)")
    return value


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One file of a manifest: its ``path`` relative to the folder, its ``size`` and
    ``mtime_ns`` on the client's disk, and the SHA-256 of its bytes."""

    path: str
    size: int
    mtime_ns: int
    sha256: str


@dataclass
class SyncNeed:
    """What the service answers a manifest (:func:`sync_need`): the paths whose bytes it
    ``need``\\ s, how many files are ``unchanged``, ``errors`` (by id: files it will not take,
    each with the reason, as an in-process index reports them), ``held`` (paths of its
    resources under the folder that the manifest does not name), the folder its ids are
    relative to (``id_root``) with ``notes`` on why, and the largest upload it takes."""

    root: str
    id_root: str
    need: list[str] = field(default_factory=list)
    unchanged: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    held: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    max_upload_bytes: int = 0
    #: ids of files deleted by hand while they stayed (:func:`~hybridsag.ingest.folders.without_excluded`)
    excluded: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "id_root": self.id_root,
            "need": list(self.need),
            "excluded": list(self.excluded),
            "unchanged": self.unchanged,
            "errors": dict(self.errors),
            "held": list(self.held),
            "notes": list(self.notes),
            "max_upload_bytes": self.max_upload_bytes,
        }


def _plan(store: Store, root: str, paths: Sequence[str], tenant: str) -> FolderPlan:
    """The folder plan of ``root`` holding ``paths``, with the roots ``tenant`` indexed before
    (pure path arithmetic: nothing on the service's disk is touched)."""
    folder = Path(root)
    scan = FolderScan(folder=folder, files=tuple(folder / p for p in paths))
    return plan_folder(store, scan, tenant=tenant)


def _id_of(plan: FolderPlan, file: Path) -> str:
    return file.relative_to(plan.root_of(file)).as_posix()


def _out_of_scope(record: ResourceRecord) -> str:
    return (
        f"the id is held by a resource of ACL tags {list(record.acl)} that this token does not "
        "hold; not replaced"
    )


def _held(
    store: Store, root: str, tenant: str, named: Collection[str], visible: Visible | None
) -> list[ResourceRecord]:
    """The resources of ``tenant`` under ``root`` that a prune may delete and ``named`` does
    not name (each path relative to ``root``)."""
    prefix = root + "/"
    return [
        r
        for r in store.folder_resources(root, tenant=tenant)
        if r.status in PRUNABLE
        and r.source_uri is not None
        and r.source_uri.removeprefix(prefix) not in named
        and (visible is None or visible(r))
    ]


def sync_need(
    store: Store,
    settings: Settings,
    *,
    root: str,
    files: Sequence[ManifestEntry],
    tenant: str = "",
    acl: Sequence[str] = (),
    max_upload_bytes: int,
    visible: Visible | None = None,
) -> SyncNeed:
    """The answer to a manifest (step 1 in the module docstring): nothing is written.

    A file is needed unless its resource holds it already: the same source file, the same
    SHA-256 of its bytes (``source_sha256``), the same ACL tags and id root, ``ready`` or
    ``disabled``. A file over ``ingest.max_file_mb`` (a converted one: also over
    ``formats.max_source_mb``) or over ``max_upload_bytes`` (``server.max_body_bytes``) is
    reported as skipped, as an in-process index skips a file over its size cap; so is a file
    whose id another file holds (:func:`~hybridsag.ingest.folders.taken_by`) or whose resource the
    caller may not see.

    Raises:
        InputError: a bad root or path (the message names it).
    """
    check_root(root)
    paths = [check_rel(f.path) for f in files]
    plan = _plan(store, root, paths, tenant)
    converter = DocumentConverter.from_settings(settings)
    max_file = int(settings.ingest.max_file_mb * _MIB)
    tags = tuple(sorted(set(acl)))
    ids = [_id_of(plan, file) for file in plan.scan.files]
    records = store.resources(resource_key(rid, tenant) for rid in ids)
    answer = SyncNeed(
        root=root, id_root=str(plan.root), notes=list(plan.notes), max_upload_bytes=max_upload_bytes
    )
    _kept, answer.excluded = without_excluded(
        store, [(str(plan.root_of(file)), rid) for file, rid in zip(plan.scan.files, ids)],
        tenant=tenant,
    )
    left_out = set(answer.excluded)
    for entry, file, rid in zip(files, plan.scan.files, ids):
        if rid in left_out:
            continue
        try:
            limit, limit_name = file_limit(entry.path, max_file, converter)
            check_size(entry.size, limit, limit_name)
            check_size(entry.size, max_upload_bytes, "server.max_body_bytes")
        except (IngestError, ConfigError) as exc:
            answer.errors[printable(rid)] = str(exc)
            continue
        record = records.get(resource_key(rid, tenant))
        uri = str(file)
        if record is not None and visible is not None and not visible(record):
            answer.errors[printable(rid)] = _out_of_scope(record)
            continue
        reason = taken_by(record, uri)
        if reason is not None:
            answer.errors[printable(rid)] = reason
            continue
        try:  # what the upload's document would refuse (an id too long with its tenant, ...)
            make_document(rid, "", tenant=tenant, acl=tags, source_uri=uri, source_root=root)
        except IngestError as exc:
            answer.errors[printable(rid)] = str(exc)
            continue
        if (
            record is not None
            and record.source_uri == uri
            and record.source_sha256 == entry.sha256
            and record.source_root == str(plan.root_of(file))
            and record.acl == tags
            and record.status in ("ready", "disabled")
            and record.pending_version is None
        ):
            answer.unchanged += 1
        else:
            answer.need.append(entry.path)
    prefix = root + "/"
    answer.held = [
        r.source_uri.removeprefix(prefix)  # type: ignore[union-attr]
        for r in _held(store, root, tenant, set(paths), visible)
    ]
    return answer


@dataclass(frozen=True)
class PreparedUpload:
    """An uploaded file made into its document (:func:`prepare_upload`), to be applied by the
    writer (:func:`apply_upload`): its id (``rid``), the folder its id is relative to
    (``id_root``), its path on the client (``source_uri``), the document (None when there is
    nothing to write: ``report`` then says why) and the warnings of what was left out."""

    rid: str
    id_root: str
    source_uri: str
    report: IngestReport
    doc: Document | None = None
    warnings: tuple[str, ...] = ()


def prepare_upload(
    store: Store,
    settings: Settings,
    *,
    root: str,
    path: str,
    sha256: str,
    data: bytes,
    tenant: str = "",
    acl: Sequence[str] = (),
    visible: Visible | None = None,
    cancel: threading.Event | None = None,
) -> PreparedUpload:
    """Step 2, first half, which writes nothing and needs no writer: the bytes are checked
    against ``sha256`` and made into a document by :func:`~hybridsag.ingest.sources.file_document`
    under the id an in-process index gives it (a PDF, DOCX, HTML or EPUB converted in its
    bounded process: :class:`~hybridsag.ingest.formats.DocumentConverter`, stopped when
    ``cancel`` is set). A file that cannot be decoded or converted, is over a size limit, or
    whose id another file holds is reported in the report's ``errors``, as in-process.

    Raises:
        InputError: a bad root, path or hash, or bytes whose SHA-256 is not ``sha256`` (the
            file changed while it was sent: send it again).
        ForbiddenError: its resource is one the caller may not see (``visible``).
        WriteCancelledError: ``cancel`` was set while converting.
    """
    check_root(root)
    check_rel(path)
    check_sha256(sha256)
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise InputError(
            f"the bytes sent for {path!r:.200} have SHA-256 {got}, not {sha256} as the request "
            "says (the file changed while it was sent?); send it again"
        )
    plan = _plan(store, root, [path], tenant)
    file = plan.scan.files[0]
    id_root = str(plan.root_of(file))
    rid = _id_of(plan, file)
    report = IngestReport(root=str(plan.root), notes=list(plan.notes))
    prepared = PreparedUpload(rid=rid, id_root=id_root, source_uri=str(file), report=report)
    record, refusal = _upload_refusal(store, prepared, tenant, visible)
    if refusal is not None:
        return refusal
    converter = DocumentConverter.from_settings(settings, cancel=cancel)
    try:
        limit, limit_name = file_limit(path, int(settings.ingest.max_file_mb * _MIB), converter)
        check_size(len(data), limit, limit_name)
        reason = taken_by(record, str(file))
        if reason is not None:
            raise IngestError(reason)
        doc, warnings = file_document(
            rid, data, root=id_root, source_uri=str(file), tenant=tenant, acl=tuple(acl),
            converter=converter,
        )
    except (IngestError, ConfigError) as exc:
        report.errors[printable(rid)] = str(exc)
        return prepared
    return dataclasses.replace(prepared, doc=doc, warnings=tuple(warnings))


def _upload_refusal(
    store: Store, prepared: PreparedUpload, tenant: str, visible: Visible | None
) -> tuple[ResourceRecord | None, PreparedUpload | None]:
    """The stored record of an upload's id, and the upload with nothing to write when its
    file is excluded (deleted by hand while it stayed); ForbiddenError when the record is one
    the caller may not see."""
    rid = prepared.rid
    if without_excluded(store, [(prepared.id_root, rid)], tenant=tenant)[1]:
        prepared.report.excluded.append(rid)  # deleted by hand while the file stayed
        return None, dataclasses.replace(prepared, doc=None)
    record = store.get_resource(rid, tenant=tenant)
    if record is not None and visible is not None and not visible(record):
        raise ForbiddenError(f"{rid!r:.200}: {_out_of_scope(record)}")
    return record, None


def apply_upload(
    store: Store,
    writer: Writer,
    prepared: PreparedUpload,
    *,
    visible: Visible | None = None,
    cancel: threading.Event | None = None,
) -> IngestReport:
    """Step 2, second half, on the writer: what :func:`prepare_upload` checked is checked
    again (the record may have changed while the file was converted: excluded, now out of the
    caller's scope, or its id taken by another file), then the document is ingested (unchanged
    content is not re-indexed); the report of the upload.

    Raises:
        ForbiddenError: its resource is now one the caller may not see.
        StoreError, DenseError, WriteCancelledError: from the write path.
    """
    doc = prepared.doc
    if doc is None:
        return prepared.report
    record, refusal = _upload_refusal(store, prepared, doc.tenant, visible)
    if refusal is not None:
        return refusal.report
    reason = taken_by(record, prepared.source_uri)
    if reason is not None:
        prepared.report.errors[printable(prepared.rid)] = reason
        return prepared.report
    done = writer.ingest_many([doc], cancel=cancel)
    done.root, done.notes = prepared.report.root, prepared.report.notes
    done.warnings.extend(f"{printable(prepared.rid)}: {w}" for w in prepared.warnings)
    return done


def sync_commit(
    store: Store,
    writer: Writer,
    *,
    root: str,
    paths: Collection[str],
    tenant: str = "",
    prune: bool = True,
    visible: Visible | None = None,
) -> IngestReport:
    """End a sync (step 3): with ``prune``, delete through the write path the resources of
    ``tenant`` under ``root`` that ``paths`` (every file the client's folder still holds,
    relative to ``root``) does not name, listing them in ``pruned``; none when ``paths`` is
    empty (a warning says so). A resource the caller may not see is left alone.

    Raises:
        InputError: a bad root or path.
        StoreError, DenseError: from the write path (what was pruned before stays pruned).
    """
    check_root(root)
    named = {check_rel(p) for p in paths}
    plan = _plan(store, root, sorted(named), tenant)
    report = IngestReport(root=str(plan.root), notes=list(plan.notes))
    if prune:
        gone = _held(store, root, tenant, named, visible)
        prune_gone(writer.delete, root, gone, bool(named), report)
    return report
