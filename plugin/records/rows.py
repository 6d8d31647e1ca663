"""The records a read of the store returns: :class:`ResourceRecord` (a ``resources`` row),
:class:`ChunkRecord` (a chunk with its resource's title, source and status),
:class:`Exclusion` (a folder file kept out by hand), and the ``chunks`` columns of a chunk's
fusion facts (:func:`facts_columns`, :func:`facts_of`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from hybridsag.fusion.facts import decode_shingles, encode_shingles
from hybridsag.fusion.types import ChunkFacts
from hybridsag.records.keys import resource_key, split_key

__all__ = ["ChunkRecord", "Exclusion", "ResourceRecord", "facts_columns", "facts_of"]


@dataclass(frozen=True, slots=True)
class ResourceRecord:
    """A stored resource: ``resource_id`` is its public id within ``tenant`` (:attr:`key` is
    what the store keys it by)."""

    resource_id: str
    title: str
    title_norm: str
    source_uri: str | None
    source_mtime_ns: int | None
    source_size: int | None
    content_sha256: str
    tenant: str
    acl: tuple[str, ...]
    metadata: Mapping[str, Any]
    status: str
    version: int
    pending_version: int | None
    created_at: float
    updated_at: float
    error: str | None
    #: the folder the id of a folder resource is relative to (``None``: API or JSONL ingest)
    source_root: str | None = None
    #: SHA-256 of the source file's bytes as read (``None``: API or JSONL ingest)
    source_sha256: str | None = None

    @property
    def key(self) -> str:
        """The store's key of this resource (:func:`resource_key`)."""
        return resource_key(self.resource_id, self.tenant)

    @classmethod
    def from_row(cls, row: Any) -> ResourceRecord:
        """A record from a ``resources`` row (whose ``resource_id`` is the key)."""
        return cls(**_decoded(row, _RESOURCE_FIELDS))


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A folder file kept out of its folder's index: the resource ``path`` (its id, relative to
    ``source_root``) of ``tenant`` was deleted by hand while its file still existed. ``acl`` is
    the deleted resource's, given back when the exclusion is lifted."""

    tenant: str
    source_root: str
    path: str
    acl: tuple[str, ...]
    excluded_at: float

    @property
    def resource_id(self) -> str:
        return self.path

    @property
    def source_uri(self) -> str:
        """Where the file is (the root joined with the path)."""
        return f"{self.source_root.rstrip('/')}/{self.path}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "resource_id": self.path,
            "tenant": self.tenant,
            "status": "excluded",
            "source_root": self.source_root,
            "source_uri": self.source_uri,
            "acl": list(self.acl),
            "excluded_at": self.excluded_at,
        }

    @classmethod
    def from_row(cls, row: Any) -> Exclusion:
        """An exclusion from an ``exclusions`` row."""
        return cls(**_decoded(row, _EXCLUSION_FIELDS))


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """A stored chunk joined with its resource: everything a result shows (``resource_id``
    the public id within ``tenant``; :attr:`key` the store's key of the resource)."""

    chunk_id: str
    resource_id: str
    version: int
    ordinal: int
    heading_path: str
    text: str
    start_line: int
    end_line: int
    byte_start: int
    byte_end: int
    content_sha256: str
    title: str
    source_uri: str | None
    tenant: str
    status: str

    @property
    def key(self) -> str:
        """The store's key of this chunk's resource (:func:`resource_key`)."""
        return resource_key(self.resource_id, self.tenant)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ChunkRecord:
        """A record from a row of ``_CHUNK_SELECT`` (whose ``resource_id`` is the key)."""
        values = list(row)
        values[1] = split_key(values[1])[1]
        return cls(*values)


#: how a column is read into a record's field where it is not taken as it is: the key's public id,
#: JSON lists as tuples, JSON objects
_DECODE: Mapping[str, Callable[[Any], Any]] = {
    "resource_id": lambda key: split_key(key)[1],
    "acl": lambda text: tuple(json.loads(text)),
    "metadata": json.loads,
}
_RESOURCE_FIELDS = tuple(f.name for f in fields(ResourceRecord))
_EXCLUSION_FIELDS = tuple(f.name for f in fields(Exclusion))


def _decoded(row: Any, names: Sequence[str]) -> dict[str, Any]:
    """The fields ``names`` read from ``row`` by column name, decoded as :data:`_DECODE` says."""
    return {name: _DECODE.get(name, _same)(row[name]) for name in names}


def _same(value: Any) -> Any:
    return value


def facts_columns(facts: ChunkFacts) -> tuple[str, int, bytes]:
    """The ``chunks`` columns ``script, heading_only, shingles`` of ``facts`` (the script ``''``
    when none dominates)."""
    return facts.script or "", int(facts.heading_only), encode_shingles(facts.shingles)


def facts_of(script: str | None, heading_only: int | None, blob: bytes | None) -> ChunkFacts | None:
    """:func:`facts_columns` undone; ``None`` for a row whose facts are not computed yet."""
    if blob is None or script is None or heading_only is None:
        return None
    return ChunkFacts(script or None, decode_shingles(bytes(blob)), bool(heading_only))
