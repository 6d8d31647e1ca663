"""Source drift: folder resources against the files they were indexed from.

Beside the index drift of :mod:`hybridsag.consistency.plan` (vectors, rows, claims), a plan holds
what changed on disk since the folders were indexed. :func:`read_sources` reads it, for every
folder root (``source_root``) a tenant indexed before, as ``hybridsag index ROOT`` would see it
(the same walk, :func:`hybridsag.ingest.sources.scan_folder`, the same ids,
:func:`hybridsag.ingest.folders.plan_folder`, the same exclusions,
:func:`hybridsag.ingest.folders.without_excluded`, the same guarded reads,
:func:`hybridsag.ingest.sources.iter_files` under ``ingest.max_file_mb`` and the formats bounds), but
reading only the files whose ``stat`` moved and the new ones:

``source_changed``
    a resource whose file's size or mtime differ from the recorded ones **and** whose file now
    makes another document (text, title or metadata) than the indexed one: re-indexed.
``source_deleted``
    a resource whose file is gone from disk: deleted through the write path, under the
    mass-delete guard (a folder that lost all its files, or more than
    ``consistency.max_delete_share`` of them, looks like an unmounted disk:
    :func:`source_guard`).
``source_new``
    a file under a root of the tenant that the folder rules index and no resource holds (and
    not excluded by a ``delete``): indexed, with the ACL the root's resources share.

Not findings (no work, in the report all the same): ``touched`` files (the stat moved, the bytes
did not: a ``touch``, a ``git checkout`` of the same content; apply refreshes the recorded stat),
``skipped`` files (unreadable now, over a size bound, out of the folder rules while still on
disk, an id another file holds, a root whose resources carry different ACLs) and roots ``not
checked`` (no folder on this host: a client's folder synced through the service, a disk that is
not mounted; resources synced from a client, which record no stat of this host, likewise).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hybridsag.documents import Document, printable, same_document
from hybridsag.errors import IngestError
from hybridsag.ingest.folders import (
    PRUNABLE,
    FolderPlan,
    plan_folder,
    read_files,
    taken_by,
    without_excluded,
)
from hybridsag.search import STALE_DELETED, stale_reason
from hybridsag.settings import Settings
from hybridsag.ingest.sources import SourceErrors, scan_folder
from hybridsag.records.keys import resource_key
from hybridsag.records.rows import ResourceRecord
from hybridsag.records.store import Store

__all__ = ["SourceDrift", "SourceItem", "read_sources", "source_documents", "source_guard"]

#: Statuses whose file is compared with the index (a write in flight is the write path's).
_CURRENT = ("ready", "disabled")


@dataclass(frozen=True, slots=True)
class SourceItem:
    """One folder file of the drift: the resource ``path`` (its id) of ``tenant``, relative
    to ``source_root``, at ``source_uri``, and the ``acl`` it is (or would be) indexed with."""

    tenant: str
    path: str
    source_root: str
    source_uri: str
    acl: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The store's key of the resource (:func:`hybridsag.records.store.resource_key`)."""
        return resource_key(self.path, self.tenant)

    @property
    def label(self) -> str:
        """How reports name it: the id, and the tenant when there is one."""
        return f"{self.path} (tenant {self.tenant!r})" if self.tenant else self.path


@dataclass(frozen=True, slots=True)
class RootCheck:
    """One folder root checked: its ``tenant``, the ``root``, the ``resources`` indexed from it
    and how many of them are ``gone`` from disk (what the mass-delete guard weighs)."""

    tenant: str
    root: str
    resources: int
    gone: int


@dataclass(frozen=True, slots=True)
class SourceDrift:
    """What :func:`read_sources` found (see the module docstring)."""

    changed: tuple[SourceItem, ...] = ()
    deleted: tuple[SourceItem, ...] = ()
    new: tuple[SourceItem, ...] = ()
    touched: tuple[SourceItem, ...] = ()
    #: (where, why) of each file left alone
    skipped: tuple[tuple[str, str], ...] = ()
    #: (root, why) of each root not looked at
    not_checked: tuple[tuple[str, str], ...] = ()
    roots: tuple[RootCheck, ...] = ()
    #: folder resources whose file was compared
    checked: int = 0

    def summary(self, limit: int = 10) -> dict[str, object]:
        """The JSON-safe part of a report: what is no work but is said (touched, skipped, not
        checked) and what was looked at."""
        return {
            "roots_checked": [{"tenant": r.tenant, "root": r.root} for r in self.roots],
            "resources_checked": self.checked,
            "touched": len(self.touched),
            "touched_sample": [x.label for x in self.touched[:limit]],
            "skipped": [{"where": w, "why": y} for w, y in self.skipped[:limit]],
            "skipped_count": len(self.skipped),
            "not_checked": [{"root": r, "why": y} for r, y in self.not_checked],
        }


def _top_roots(roots: Sequence[str]) -> list[str]:
    """The roots not inside another of ``roots`` (a walk of each covers the inner ones)."""
    paths = sorted({Path(r) for r in roots}, key=lambda p: len(p.parts))
    top: list[Path] = []
    for p in paths:
        if not any(p != t and p.is_relative_to(t) for t in top):
            top.append(p)
    return [str(p) for p in top]


def source_documents(
    items: Iterable[SourceItem], settings: Settings, errors: SourceErrors
) -> list[Document]:
    """The documents the files of ``items`` make now, read as a folder index reads them (each
    under its own root, tenant and ACL: :func:`hybridsag.ingest.folders.read_files`); what cannot be
    read goes to ``errors``."""
    entries = ((Path(i.source_uri), Path(i.source_root), i.tenant, i.acl) for i in items)
    return list(read_files(entries, settings, errors))


class _Reader:
    """The state of one :func:`read_sources`."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.changed: list[SourceItem] = []
        self.deleted: list[SourceItem] = []
        self.new: list[SourceItem] = []
        self.touched: list[SourceItem] = []
        self.skipped: list[tuple[str, str]] = []
        self.not_checked: list[tuple[str, str]] = []
        self.roots: list[RootCheck] = []
        self.checked = 0

    def read_one(self, item: SourceItem) -> Document | None:
        """The document ``item``'s file makes now, or None (the reason in ``skipped``)."""
        errors = SourceErrors()
        docs = source_documents([item], self.settings, errors)
        for where, why in errors.errors.items():
            self.skipped.append((item.label if where == item.path else where, why))
        return docs[0] if docs else None

    def root(self, tenant: str, root: str) -> None:
        """Compare the folder ``root`` of ``tenant`` with its resources."""
        where = f"{root} (tenant {tenant!r})" if tenant else root
        try:
            here = os.path.isdir(root)
        except ValueError:
            here = False
        if not here:
            self.not_checked.append(
                (where, "not a folder on this host (a client's folder synced through the "
                 "service, or a disk that is not mounted): its resources were not checked")
            )
            return
        errors = SourceErrors()
        try:
            scan = scan_folder(Path(root), errors, converts=True)
        except IngestError as exc:
            self.not_checked.append((where, str(exc)))
            return
        for path, why in errors.errors.items():
            self.skipped.append((f"{root}/{path}", why))
        plan = plan_folder(self.store, scan, tenant=tenant)
        records = self.store.folder_resources(root, tenant=tenant)
        local = [r for r in records if r.source_mtime_ns is not None]
        if len(local) < len(records):
            self.skipped.append(
                (where, f"{len(records) - len(local)} resource(s) synced from a client, which "
                 "record no stat of this host: not checked")
            )
        listed = set(map(str, scan.files))
        gone = 0
        for record in local:
            gone += self.resource(record, listed)
        self.roots.append(RootCheck(tenant, root, len(local), gone))
        self.new_files(tenant, plan, scan.files, records)

    def resource(self, record: ResourceRecord, listed: set[str]) -> int:
        """Compare one resource with its file; 1 when the file is gone (planned for delete)."""
        assert record.source_uri is not None and record.source_root is not None
        item = SourceItem(
            record.tenant, record.resource_id, record.source_root, record.source_uri, record.acl
        )
        if record.status not in PRUNABLE:
            return 0  # a write in flight: the write path's, and the index drift's
        self.checked += 1
        reason = stale_reason(record)
        if reason is None:
            return 0
        if reason == STALE_DELETED and not os.path.lexists(record.source_uri):
            self.deleted.append(item)
            return 1
        if record.status not in _CURRENT:
            return 0  # a failed resource: its next index says why again
        if record.source_uri not in listed:
            self.skipped.append(
                (item.label, f"{printable(record.source_uri)} is {reason} and no longer indexed "
                 "by its folder's rules (ignored, hidden, a dangling link or an unreadable "
                 "folder): left as indexed; hybridsag delete removes it")
            )
            return 0
        doc = self.read_one(item)
        if doc is not None:
            (self.touched if same_document(record, doc) else self.changed).append(item)
        return 0

    def new_files(
        self,
        tenant: str,
        plan: FolderPlan,
        files: Sequence[Path],
        records: Sequence[ResourceRecord],
    ) -> None:
        """The files under the root that no resource holds (and not excluded)."""
        keyed: dict[tuple[str, str], Path] = {}
        for file in files:
            root = plan.root_of(file)
            keyed[(str(root), file.relative_to(root).as_posix())] = file
        kept, _excluded = without_excluded(self.store, keyed, tenant=tenant)
        held = {r.source_uri for r in records}
        candidates = [(root, rel) for root, rel in kept if str(keyed[(root, rel)]) not in held]
        if not candidates:
            return
        existing = self.store.resources(resource_key(rel, tenant) for _, rel in candidates)
        acls: dict[str, set[tuple[str, ...]]] = {}
        for r in records:
            if r.source_root is not None:
                acls.setdefault(r.source_root, set()).add(r.acl)
        for root, rel in candidates:
            uri = str(keyed[(root, rel)])
            label = f"{rel} (tenant {tenant!r})" if tenant else rel
            other = existing.get(resource_key(rel, tenant))
            if other is not None:
                why = taken_by(other, uri) or (
                    f"the id is held by the resource of {printable(other.source_uri or '?')}, "
                    "whose file is gone: index the folder to move it"
                )
                self.skipped.append((label, why))
                continue
            shared = acls.get(root, set())
            if len(shared) != 1:
                self.skipped.append(
                    (label, f"the resources of {root} carry different ACLs (or none is left): "
                     "index it with hybridsag index ROOT --acl ... to say which")
                )
                continue
            item = SourceItem(tenant, rel, root, uri, next(iter(shared)))
            if self.read_one(item) is not None:
                self.new.append(item)


def read_sources(store: Store, settings: Settings) -> SourceDrift:
    """The source drift of every folder root of every tenant (see the module docstring).
    Reads the files whose ``stat`` moved and the new ones (guarded, bounded reads); writes
    nothing.

    Raises:
        StoreError: reading the store failed.
    """
    reader = _Reader(store, settings)
    by_tenant: dict[str, list[str]] = {}
    for tenant, root in store.source_roots():
        by_tenant.setdefault(tenant, []).append(root)
    for tenant in sorted(by_tenant):
        for root in _top_roots(by_tenant[tenant]):
            reader.root(tenant, root)
    return SourceDrift(
        changed=tuple(reader.changed),
        deleted=tuple(reader.deleted),
        new=tuple(reader.new),
        touched=tuple(reader.touched),
        skipped=tuple(reader.skipped),
        not_checked=tuple(reader.not_checked),
        roots=tuple(reader.roots),
        checked=reader.checked,
    )


def source_guard(drift: SourceDrift, max_share: float, max_count: int) -> str | None:
    """Why the mass-delete guard refuses the drift's deletions (None: it does not): a root
    whose files are all gone, or more than one and more than ``max_share`` of them (an
    unmounted disk, a moved folder, a half-finished checkout), or more than ``max_count``
    deletions in all."""
    total = len(drift.deleted)
    if total > max_count:
        return (
            f"the plan would delete {total} resources whose files are gone, over "
            f"consistency.max_delete_count={max_count}"
        )
    for r in drift.roots:
        if not r.gone:
            continue
        if r.gone == r.resources or (r.gone > 1 and r.gone > max_share * r.resources):
            where = f"{r.root} (tenant {r.tenant!r})" if r.tenant else r.root
            return (
                f"{r.gone} of the {r.resources} files indexed from {where} are gone from disk "
                f"({r.gone / r.resources:.0%}; consistency.max_delete_share={max_share}): an "
                "unmounted disk or a moved folder? Check the folder"
            )
    return None
