"""Folder ingest that stays in sync with the folder: stable ids, pruning, single files.

**Ids.** A folder resource's id is its path relative to a *root*: the innermost folder indexed
before that holds the file, else the folder named now (for a single file: its folder). The root
is recorded on the resource (``source_root``). So ``index docs/`` then ``index docs/kms/`` keeps
``kms/encrypt.rst`` (``docs/`` is the root of both); ``index docs/kms/`` then ``index docs/``
keeps ``encrypt.rst`` for the files under ``docs/kms/`` (its own root) and gives the other files
ids relative to ``docs/``. Either way a file has one id, whichever folder was named; the report's
``notes`` say which root was used and why.

**Ids taken.** Two folders can hold the same relative path (``a/README.md`` and
``b/README.md`` are both ``README.md``). A file never replaces a resource that came from another
file that still exists, nor one ingested through the API or JSONL: it is reported and skipped.
A resource whose file is gone (the folder was moved) is taken over by the file now at its id.

**Tenants.** All of the above is per tenant (``index DIR --tenant T``): a tenant's folder ids,
roots and pruning see only that tenant's resources, so two tenants indexing folders whose files
share relative paths each keep their own resources.

**Pruning.** After a folder is indexed, the resources indexed from files under it whose files
are gone from disk are deleted through the write path (tombstoned, then removed on every path)
and listed in ``IngestReport.pruned``. A file that still exists is never pruned, even when it is
now ignored, hidden or unreadable (search marks it stale; ``hybridsag delete`` removes it).
Resources of other folders, and those from the API or JSONL, are never touched. A walk that
finds no file at all prunes nothing (an unmounted disk looks like an empty folder). A resource a
client synced through the service (:mod:`hybridsag.ingest.manifest`: no stat recorded, its file is on
the client's disk) is never taken as gone here (:func:`source_gone`): its client's sync prunes
it.

**Part of a folder.** :func:`ingest_path` can read only the files a file watcher saw change
(``only``) or those whose ``stat`` differs from the recorded one (``changed_only``: a rescan);
the scan still decides which files the folder holds, and pruning still covers all of it. Each
file's record holds the SHA-256 of its bytes (``source_sha256``), so a touched file is told
from a changed one without reading it again into the index.

**Exclusions.** A folder file whose resource was deleted by hand while the file stayed
(``hybridsag delete``, :meth:`hybridsag.ingest.writer.Writer.delete` with ``exclude``) is left out of
every later index of its folder and listed in ``IngestReport.excluded``, until ``hybridsag
include`` lifts it (:func:`include_file`). :func:`without_excluded` is the one check: folder
index, folder sync through the service, watched folders and the reconciler all call it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from hybridsag.documents import Document, IngestReport, printable
from hybridsag.ingest.formats import DocumentConverter
from hybridsag.ingest.progress import IngestProgress, as_progress
from hybridsag.settings import Settings
from hybridsag.ingest.sources import FolderScan, SourceErrors, id_root, iter_files, scan_folder
from hybridsag.records.rows import Exclusion, ResourceRecord
from hybridsag.records.store import Store
from hybridsag.ingest.writer import Writer

__all__ = [
    "PRUNABLE",
    "FolderPlan",
    "changed_files",
    "include_file",
    "ingest_path",
    "plan_folder",
    "prune_gone",
    "read_files",
    "select_files",
    "source_gone",
    "taken_by",
    "without_excluded",
]

_MIB = 1024 * 1024
#: Statuses a prune deletes (``indexing`` and ``deleting`` belong to a write in flight).
PRUNABLE = ("ready", "disabled", "failed")


@dataclass(frozen=True, slots=True)
class FolderPlan:
    """How a folder (or file) is keyed: its ``scan``, the ``root`` new ids are relative to, the
    folders ``indexed`` before (each the root of its own files), and ``notes`` for the user."""

    scan: FolderScan
    root: Path
    indexed: tuple[Path, ...]
    notes: tuple[str, ...]

    def root_of(self, file: Path) -> Path:
        """The folder ``file``'s id is relative to."""
        return id_root(file, self.indexed, self.root)


def plan_folder(store: Store, scan: FolderScan, *, tenant: str = "") -> FolderPlan:
    """The roots of a scanned folder's files, from the folders ``tenant`` indexed before."""
    indexed = tuple(Path(r) for r in store.folder_roots(tenant=tenant))
    named = scan.folder.parent if scan.single_file else scan.folder
    holding = [r for r in indexed if named == r or named.is_relative_to(r)]
    root = max(holding, key=lambda r: len(r.parts)) if holding else named
    notes = []
    if root != named:
        notes.append(
            f"{named} is inside {root}, indexed before: ids stay relative to it "
            f"({named.relative_to(root).as_posix()}/...)"
        )
    inner = [r for r in indexed if r != named and r.is_relative_to(named)]
    for r in sorted(inner):
        notes.append(f"files under {r}, indexed before, keep ids relative to it")
    return FolderPlan(scan=scan, root=root, indexed=indexed, notes=tuple(notes))


def source_gone(record: ResourceRecord) -> bool:
    """Whether the file of the folder resource ``record`` is known to be gone: a file this
    process indexed from its own disk (its stat is recorded) that no longer exists. A file a
    client synced through the service (no stat recorded: it is on the client's disk) is never
    known gone here; the client's next sync prunes it."""
    if record.source_uri is None:
        return True
    return record.source_mtime_ns is not None and not os.path.lexists(record.source_uri)


def taken_by(existing: ResourceRecord | None, source_uri: str | None) -> str | None:
    """Why the folder file at ``source_uri`` may not replace the resource ``existing`` under
    its id, or ``None`` when it may (no such resource, the same file, or a file that is
    gone)."""
    if existing is None or existing.source_uri == source_uri:
        return None
    if existing.source_root is None:
        return (
            "the id is taken by a resource ingested through the API or JSONL "
            f"(source {existing.source_uri!r}); not replaced: delete it first"
        )
    if not source_gone(existing):
        return (
            f"the id is taken by {printable(existing.source_uri)} (indexed from "
            f"{printable(existing.source_root)}); not replaced: index a folder that holds both, "
            "or delete that resource first"
        )
    return None


def without_excluded(
    store: Store, files: Iterable[tuple[str, str]], *, tenant: str = ""
) -> tuple[list[tuple[str, str]], list[str]]:
    """Which folder files of ``tenant`` may be indexed: of the ``(root, relative path)``
    pairs ``files`` (the root a file's id is relative to, and that id), the ones that are not
    excluded (deleted by hand while the file stayed: :meth:`Store.exclusions`), in order, and
    the ids of those that are. The one check every way a folder reaches the index makes
    (folder index, sync, watch, reconcile)."""
    excluded = store.excluded_paths(tenant=tenant)
    kept: list[tuple[str, str]] = []
    left_out: list[str] = []
    for root, rel in files:
        if (root, rel) in excluded:
            left_out.append(rel)
        else:
            kept.append((root, rel))
    return kept, left_out


def include_file(
    store: Store,
    writer: Writer,
    settings: Settings,
    resource_id: str,
    *,
    tenant: str = "",
) -> tuple[list[Exclusion], IngestReport]:
    """Lift the exclusions of the folder file ``resource_id`` of ``tenant`` and index the file
    again from where it was (its root, with the ACL it had), as its folder's index would.
    Returns the lifted exclusions (empty: there was none) and the ingest report (a file gone
    meanwhile, or whose id another file took, is in its ``errors``)."""
    lifted = store.remove_exclusions(resource_id, tenant=tenant)
    report = IngestReport()
    for ex in lifted:
        errors = SourceErrors()
        root = Path(ex.source_root)
        file = root / ex.path
        if not os.path.lexists(file):
            report.errors[ex.path] = f"{printable(str(file))} is gone: nothing to index"
            continue
        docs = read_files([(file, root, tenant, ex.acl)], settings, errors)
        done = writer.ingest_many(free_ids(store, docs, errors))
        done.errors.update(errors.errors)
        done.warnings.extend(errors.warnings)
        report.merge(done)
    return lifted, report


def read_files(
    entries: Iterable[tuple[Path, Path, str, tuple[str, ...]]],
    settings: Settings,
    errors: SourceErrors,
) -> Iterator[Document]:
    """The documents folder files make now, each entry ``(file, the root its id is relative
    to, tenant, ACL)`` read as a folder index reads it (:func:`hybridsag.ingest.sources.iter_files`,
    ``ingest.max_file_mb`` and the formats bounds); what cannot be read goes to ``errors``."""
    converter = DocumentConverter.from_settings(settings)
    max_bytes = int(settings.ingest.max_file_mb * _MIB)
    for file, root, tenant, acl in entries:
        yield from iter_files(
            [file],
            errors,
            root_of=lambda _f, root=root: root,
            max_file_bytes=max_bytes,
            tenant=tenant,
            acl=acl,
            converter=converter,
        )


def free_ids(store: Store, docs: Iterable[Document], errors: SourceErrors) -> Iterator[Document]:
    """``docs`` less those whose id another file or resource holds (:func:`taken_by`), each
    reported in ``errors``."""
    for doc in docs:
        reason = taken_by(store.get_resource(doc.resource_id, tenant=doc.tenant), doc.source_uri)
        if reason is None:
            yield doc
        else:
            errors.add(doc.resource_id, reason)


def _ticking(
    docs: Iterable[Document], errors: SourceErrors, ticks: IngestProgress
) -> Iterator[Document]:
    """``docs``, telling ``ticks`` of each file the sources skipped as it happens."""
    counted = len(errors.errors)
    for doc in docs:
        if len(errors.errors) > counted:
            ticks.prepared(len(errors.errors) - counted, 0)
            counted = len(errors.errors)
        yield doc
    if len(errors.errors) > counted:
        ticks.prepared(len(errors.errors) - counted, 0)


def prune_gone(
    delete: Callable[[str], bool],
    folder: str,
    gone: Sequence[ResourceRecord],
    holds_files: bool,
    report: IngestReport,
) -> None:
    """Delete the resources ``gone`` (of ``folder``, whose files are gone) through ``delete``
    (which takes a resource key), listing them in ``report.pruned``; none when the folder
    ``holds_files`` no more (an unmounted disk looks like an empty folder): a warning says so.
    Folder ingest and folder sync (:mod:`hybridsag.ingest.manifest`) both prune through here."""
    if not gone:
        return
    if not holds_files:
        report.warnings.append(
            f"{folder} holds no file to index: nothing pruned, {len(gone)} resource(s) "
            "of it kept (an unmounted or emptied folder?); delete them with hybridsag delete"
        )
        return
    for record in gone:
        if delete(record.key):
            report.pruned.append(record.resource_id)


def _prune(
    store: Store,
    delete: Callable[[str], bool],
    plan: FolderPlan,
    report: IngestReport,
    tenant: str,
) -> None:
    """Delete the resources of ``tenant`` indexed from files under the folder whose files are
    gone (``delete`` takes a resource key)."""
    folder = str(plan.scan.folder)
    gone = [
        r
        for r in store.folder_resources(folder, tenant=tenant)
        if r.status in PRUNABLE and source_gone(r)
    ]
    prune_gone(delete, folder, gone, bool(plan.scan.files), report)


def select_files(files: Sequence[Path], only: Collection[Path]) -> list[Path]:
    """The ``files`` that ``only`` names, itself or by a folder that holds them."""
    named = set(only)
    return [f for f in files if f in named or any(p in named for p in f.parents)]


def changed_files(store: Store, scan: FolderScan, *, tenant: str = "") -> list[Path]:
    """The files of ``scan`` whose resource of ``tenant`` is missing, not ``ready``/``disabled``
    or recorded with another ``stat`` (size or mtime) than the file has now: what a rescan
    reads (reading nothing but ``stat``), leaving the rest as indexed."""
    records = {
        r.source_uri: r for r in store.folder_resources(str(scan.folder), tenant=tenant)
    }
    out = []
    for file in scan.files:
        rec = records.get(str(file))
        if rec is None or rec.status not in ("ready", "disabled"):
            out.append(file)
            continue
        try:
            st = os.stat(file)
        except OSError:
            out.append(file)  # reading it reports why
            continue
        if (st.st_mtime_ns, st.st_size) != (rec.source_mtime_ns, rec.source_size):
            out.append(file)
    return out


def ingest_path(
    store: Store,
    writer: Writer,
    settings: Settings,
    path: Path,
    *,
    tenant: str = "",
    acl: tuple[str, ...] = (),
    progress: IngestProgress | Callable[[int], None] | None = None,
    prune: bool = True,
    only: Collection[Path] | None = None,
    changed_only: bool = False,
    cancel: threading.Event | None = None,
) -> IngestReport:
    """Index a folder (or one file) as the module docstring says: scan, key, read, ingest,
    then prune (unless ``prune`` is false or ``path`` is a file).

    Of the files the scan finds, only those ``only`` names (files, or folders holding them:
    what a file watcher saw change) are read when it is given, and with ``changed_only`` only
    those :func:`changed_files` gives (a rescan); pruning still covers the whole folder.
    ``cancel`` stops the write as :meth:`~hybridsag.ingest.writer.Writer.ingest_many` says.

    Raises:
        IngestError: ``path`` does not exist or is a file of a kind that is not indexed.
        StoreError, DenseError: the write path failed (what was committed stays).
        WriteCancelledError: ``cancel`` was set.
    """
    errors = SourceErrors()
    converter = DocumentConverter.from_settings(settings)
    scan = scan_folder(Path(path), errors, converts=True)
    plan = plan_folder(store, scan, tenant=tenant)
    keyed: dict[tuple[str, str], Path] = {}
    for file in scan.files:
        root = plan.root_of(file)
        keyed[(str(root), file.relative_to(root).as_posix())] = file
    kept, excluded = without_excluded(store, keyed, tenant=tenant)
    files = [keyed[k] for k in kept]
    if only is not None:
        files = select_files(files, only)
    if changed_only:
        selected = set(files)
        files = [f for f in changed_files(store, scan, tenant=tenant) if f in selected]
    ticks = as_progress(progress)
    ticks.start(len(files))
    docs = iter_files(
        files,
        errors,
        root_of=plan.root_of,
        max_file_bytes=int(settings.ingest.max_file_mb * _MIB),
        tenant=tenant,
        acl=acl,
        converter=converter,
    )
    free = free_ids(store, docs, errors)
    report = writer.ingest_many(_ticking(free, errors, ticks), progress=ticks, cancel=cancel)
    report.errors.update(errors.errors)
    report.warnings.extend(errors.warnings)
    report.root = str(plan.root)
    report.notes.extend(plan.notes)
    report.excluded.extend(excluded)
    if prune and not scan.single_file:
        _prune(store, writer.delete, plan, report, tenant)
    return report
