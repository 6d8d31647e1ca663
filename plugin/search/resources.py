"""What the resource reads of :class:`~hybridsag.search.HybridSearch` return
(:class:`ResourceSummary`, :class:`ResourceDetail` with its :class:`ChunkSummary` list) and
whether a folder resource's source file is stale (:func:`stale_reason`), which a search's results
and ``hybridsag show`` both say.
"""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass
from typing import Any

from hybridsag.records.rows import ResourceRecord

__all__ = [
    "STALE_CHANGED",
    "STALE_DELETED",
    "STALE_NOT_REGULAR",
    "STALE_UNREADABLE",
    "STALE_WHY",
    "ChunkSummary",
    "ResourceDetail",
    "ResourceSummary",
    "stale_reason",
]

#: Why a folder resource is stale (:func:`stale_reason`; ``SearchResult.stale_reason``): its
#: file's size or mtime differ from what was indexed, it is gone, it is no longer a regular
#: file, or it cannot be looked at (a folder on its path lost its permissions).
STALE_CHANGED = "changed on disk"
STALE_DELETED = "deleted on disk"
STALE_NOT_REGULAR = "no longer a regular file on disk"
STALE_UNREADABLE = "unreadable on disk"
#: What a result's ``why`` says of each reason.
STALE_WHY = {
    STALE_CHANGED: "its size or mtime differ from what was indexed, so the text may be outdated",
    STALE_DELETED: "the file is gone, so the text may no longer exist anywhere",
    STALE_NOT_REGULAR: "a FIFO, device or folder now stands at its path",
    STALE_UNREADABLE: "its path cannot be looked at (permissions?)",
}


@dataclass(frozen=True, slots=True)
class ResourceSummary:
    """A resource as ``hybridsag list`` shows it: its record and its chunk count."""

    record: ResourceRecord
    chunks: int

    def as_dict(self) -> dict[str, Any]:
        r = self.record
        return {
            "resource_id": r.resource_id,
            "status": r.status,
            "version": r.version,
            "chunks": self.chunks,
            "title": r.title,
            "tenant": r.tenant,
            "source_uri": r.source_uri,
            "source_root": r.source_root,
        }


@dataclass(frozen=True, slots=True)
class ChunkSummary:
    """One chunk as ``hybridsag show`` lists it (its text left out)."""

    chunk_id: str
    ordinal: int
    heading_path: str
    start_line: int
    end_line: int
    chars: int


@dataclass(frozen=True, slots=True)
class ResourceDetail:
    """A resource's full record, its current chunks, and whether its source file is stale
    (``stale_reason`` says why: :func:`stale_reason`)."""

    record: ResourceRecord
    chunks: tuple[ChunkSummary, ...]
    stale: bool
    stale_reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self.record)
        out["metadata"] = dict(self.record.metadata)
        out["acl"] = list(self.record.acl)
        out["stale"] = self.stale
        out["stale_reason"] = self.stale_reason
        out["chunks"] = [asdict(c) for c in self.chunks]
        return out


def stale_reason(record: ResourceRecord) -> str | None:
    """Why the folder resource ``record`` is stale, or ``None`` when it is not (or is no
    folder resource): :data:`STALE_CHANGED` when its file's size or mtime differ from what was
    indexed, :data:`STALE_DELETED` when the file is gone, :data:`STALE_NOT_REGULAR` when a
    FIFO, device or folder stands at its path, :data:`STALE_UNREADABLE` when it cannot be
    looked at. Only ``stat`` is called (it never blocks on a FIFO nor reads a byte): a search
    never reads a source file, so a file swapped for a FIFO, a device or a huge file costs one
    ``stat``. A file touched with its bytes unchanged is stale until its folder is indexed
    again or ``hybridsag reconcile`` runs, which refresh the recorded stat without
    re-indexing."""
    if not record.source_uri or record.source_mtime_ns is None:
        return None
    try:
        st = os.stat(record.source_uri)
    except (FileNotFoundError, NotADirectoryError):
        return STALE_DELETED
    except (OSError, ValueError):  # ValueError: a NUL in a path given through the API
        return STALE_UNREADABLE
    if not stat.S_ISREG(st.st_mode):
        return STALE_NOT_REGULAR
    if st.st_mtime_ns != record.source_mtime_ns or st.st_size != record.source_size:
        return STALE_CHANGED
    return None
