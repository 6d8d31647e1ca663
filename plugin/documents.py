"""What a resource is before it is indexed: :class:`Document`, its validation at the edge
(:func:`make_document`), what an ingest reports (:class:`IngestReport`) and the one table of
bounds that every store checks against.

Every face that takes resources (the Python API, the CLI, the service, folder and manifest
ingest, the reconciler's source check) builds a :class:`Document` here, and the stores size
their fields from the bounds here (Milvus' VARCHAR and ARRAY lengths, the write path's checks),
so a limit has one owner. A leaf: it imports only :mod:`hybridsag.errors` and the store's key
helpers, never a store adapter or the write path.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from hybridsag.errors import IngestError
from hybridsag.records.keys import chunk_id_suffix, resource_key

if TYPE_CHECKING:
    from hybridsag.records.rows import ResourceRecord

__all__ = [
    "Chunk",
    "CHUNK_ID_SUFFIX_BYTES",
    "FORMATS",
    "MAX_ACL_TAGS",
    "MAX_ACL_TAG_BYTES",
    "MAX_CHUNK_ID_BYTES",
    "MAX_METADATA_BYTES",
    "MAX_METADATA_DEPTH",
    "MAX_METADATA_KEYS",
    "MAX_RESOURCE_ID_BYTES",
    "MAX_SOURCE_URI_CHARS",
    "MAX_TENANT_BYTES",
    "MAX_TITLE_CHARS",
    "RESOURCE_ID_FIELD_BYTES",
    "Document",
    "Format",
    "IngestReport",
    "make_document",
    "printable",
    "revalidate",
    "same_document",
]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of a resource, as the chunker cuts it and the ledger stores it.

    ``text`` is exactly ``source_bytes[byte_start:byte_end].decode("utf-8")`` where
    ``source_bytes`` is the UTF-8 encoding of the text given to
    :func:`~hybridsag.ingest.chunker.chunk_text`.
    """

    ordinal: int  # 0-based order within the resource
    text: str  # the exact source slice; heading lines are never part of it
    heading_path: str  # open headings joined with " > " ("" if none)
    start_line: int  # 1-based line of the first char of text
    end_line: int  # 1-based line of the last char of text (inclusive)
    byte_start: int  # UTF-8 byte offset into the source, inclusive
    byte_end: int  # exclusive


#: The source formats the chunker reads (a document's ``fmt``).
Format = Literal["markdown", "rst", "text"]
FORMATS: tuple[str, ...] = get_args(Format)

# --------------------------------------------------------------------------- the table of bounds
# Byte limits are UTF-8 bytes, counted where the stores count them.

#: A chunk id (Milvus' VARCHAR primary key, in both the dense and the Milvus full-text index).
MAX_CHUNK_ID_BYTES = 512
#: The stores' resource id field (its value is the public id; a tenant's key adds the tenant).
RESOURCE_ID_FIELD_BYTES = 1024
#: A tenant, and one ACL tag; at most this many ACL tags (Milvus' ARRAY capacity).
MAX_TENANT_BYTES = 256
MAX_ACL_TAG_BYTES = 256
MAX_ACL_TAGS = 256
#: A chunk id is ``<resource_id>@<version>#<ordinal>``, followed by ``@<tenant>`` (escaped) for a
#: tenant's resource (:func:`~hybridsag.records.store.chunk_id_for`): the version and ordinal take at
#: most 31 bytes (an int64 version has 19 digits, an ordinal 10), so a resource id and its
#: tenant's suffix may take what is left of Milvus' primary key
#: (:data:`MAX_CHUNK_ID_BYTES`).
CHUNK_ID_SUFFIX_BYTES = 32
MAX_RESOURCE_ID_BYTES = min(MAX_CHUNK_ID_BYTES - CHUNK_ID_SUFFIX_BYTES, RESOURCE_ID_FIELD_BYTES)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_TITLE_CHARS = 2_000
MAX_SOURCE_URI_CHARS = 4_096  # PATH_MAX on Linux
#: Metadata bounds: its JSON in UTF-8 bytes, its top-level keys (the ones filters compare) and
#: how deeply its values nest (SQLite's JSON functions refuse more than 1,000 levels).
MAX_METADATA_BYTES = 64 * 1024
MAX_METADATA_KEYS = 256
MAX_METADATA_DEPTH = 32


def printable(value: str) -> str:
    """``value`` as valid UTF-8 text for a report or a message: an undecodable byte of a file
    name (``os.fsdecode``'s surrogate escape) is written ``\\xff``, any other lone surrogate
    ``\\ud800``. Example: ``printable("bad\\udcff.md")`` -> ``"bad\\\\xff.md"``."""
    if not _SURROGATE.search(value):
        return value
    try:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True, slots=True)
class Document:
    """A validated resource to ingest (build it with :func:`make_document`)."""

    resource_id: str
    title: str
    text: str
    metadata: Mapping[str, Any]
    tenant: str
    acl: tuple[str, ...]
    source_uri: str | None
    fmt: Format
    source_mtime_ns: int | None = None
    source_size: int | None = None
    #: the folder a folder resource's id is relative to (``None``: API or JSONL ingest)
    source_root: str | None = None
    #: SHA-256 of the source file's bytes as read, before decoding or conversion (``None``:
    #: API or JSONL ingest)
    source_sha256: str | None = None
    #: computed once by :func:`make_document` (the write path stores them as they are)
    content_sha256: str = ""
    metadata_json: str = "{}"
    acl_json: str = "[]"

    @property
    def key(self) -> str:
        """The store's key of this resource (:func:`~hybridsag.records.store.resource_key`)."""
        return resource_key(self.resource_id, self.tenant)


def _utf8(name: str, value: str) -> bytes:
    """``value`` in UTF-8; a lone surrogate is an :class:`IngestError` naming where it is."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise IngestError(
            f"{name} {value!r:.80} holds a lone surrogate {value[exc.start]!r} at character "
            f"{exc.start}: not valid UTF-8"
        ) from None


def _check_text_field(
    name: str,
    value: object,
    *,
    allow_empty: bool,
    max_bytes: int | None = None,
    max_chars: int | None = None,
) -> str:
    if not isinstance(value, str):
        raise IngestError(f"{name} must be a string, got {type(value).__name__}: {value!r:.80}")
    if not allow_empty and not value.strip():
        raise IngestError(f"{name} must not be empty or whitespace")
    size = len(_utf8(name, value))
    if max_bytes is not None and size > max_bytes:
        raise IngestError(
            f"{name} {value!r:.60} is {size} bytes in UTF-8, the limit is {max_bytes}"
        )
    if max_chars is not None and len(value) > max_chars:
        raise IngestError(f"{name} is {len(value)} characters, the limit is {max_chars}")
    bad = _CONTROL.search(value)
    if bad:
        raise IngestError(f"{name} {value!r:.80} holds control character {bad.group()!r}")
    return value


def _metadata_json(resource_id: str, meta: dict[str, Any]) -> str:
    """The JSON of a resource's metadata, within :data:`MAX_METADATA_KEYS`,
    :data:`MAX_METADATA_DEPTH` and :data:`MAX_METADATA_BYTES` (depth checked without recursion,
    so a hostile nesting cannot exhaust the stack)."""
    where = f"metadata of {resource_id!r}"
    bad_keys = [k for k in meta if not isinstance(k, str)]
    if bad_keys:
        raise IngestError(f"{where} keys must be strings, got {bad_keys!r:.80}")
    if len(meta) > MAX_METADATA_KEYS:
        raise IngestError(f"{where} has {len(meta)} keys, the limit is {MAX_METADATA_KEYS}")
    stack: list[tuple[Any, int]] = [(meta, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_METADATA_DEPTH:
            raise IngestError(f"{where} nests deeper than {MAX_METADATA_DEPTH} levels")
        if isinstance(value, Mapping):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list | tuple):
            stack.extend((v, depth + 1) for v in value)
    try:
        text = json.dumps(meta, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise IngestError(f"{where} is not JSON: {exc}") from exc
    size = len(_utf8(where, text))
    if size > MAX_METADATA_BYTES:
        raise IngestError(f"{where} is {size} bytes as JSON, the limit is {MAX_METADATA_BYTES}")
    return text


def same_document(record: ResourceRecord, doc: Document) -> bool:
    """Whether ``doc`` holds what the stored ``record`` indexed: the same text (its hash),
    title, metadata, tenant, ACL and source (its file's stat aside). The write path skips such
    a document (refreshing only the stat); the reconciler calls a changed file whose document
    is the same "touched"."""
    return (
        record.content_sha256 == doc.content_sha256
        and record.title == doc.title
        and dict(record.metadata) == dict(doc.metadata)
        and record.tenant == doc.tenant
        and record.acl == doc.acl
        and record.source_uri == doc.source_uri
        and record.source_root == doc.source_root
    )


def make_document(
    resource_id: str,
    text: str,
    *,
    title: str = "",
    metadata: Mapping[str, Any] | None = None,
    tenant: str = "",
    acl: Iterable[str] = (),
    source_uri: str | None = None,
    fmt: Format = "markdown",
    source_mtime_ns: int | None = None,
    source_size: int | None = None,
    source_root: str | None = None,
    source_sha256: str | None = None,
) -> Document:
    """Validate one resource at the edge; :class:`IngestError` names the bad value.

    Limits are counted where the stores count them: the resource id in UTF-8 bytes so that its
    chunk ids fit Milvus' primary key (:data:`MAX_RESOURCE_ID_BYTES`, for a tenant's resource
    with the tenant's chunk id suffix counted in), the tenant and each ACL
    tag in bytes (:data:`MAX_TENANT_BYTES`,
    :data:`MAX_ACL_TAG_BYTES`), at most :data:`MAX_ACL_TAGS`
    tags, metadata within :data:`MAX_METADATA_BYTES` / :data:`MAX_METADATA_KEYS` /
    :data:`MAX_METADATA_DEPTH`. Every string must be valid UTF-8 (no lone surrogate).
    """
    _check_text_field(
        "resource_id", resource_id, max_bytes=MAX_RESOURCE_ID_BYTES, allow_empty=False
    )
    if resource_id != resource_id.strip():
        raise IngestError(f"resource_id {resource_id!r} has leading or trailing whitespace")
    _check_text_field("title", title, max_chars=MAX_TITLE_CHARS, allow_empty=True)
    title = " ".join(title.split())
    if not isinstance(text, str):
        raise IngestError(f"text of {resource_id!r} must be a string, got {type(text).__name__}")
    if "\x00" in text:
        raise IngestError(f"text of {resource_id!r} holds a NUL character")
    text_bytes = _utf8(f"text of {resource_id!r}:", text)
    _check_text_field("tenant", tenant, max_bytes=MAX_TENANT_BYTES, allow_empty=True)
    if tenant:  # its chunk ids end with the tenant: the id gets what is left
        size = len(resource_id.encode("utf-8")) + len(chunk_id_suffix(tenant).encode("utf-8"))
        if size > MAX_RESOURCE_ID_BYTES:
            raise IngestError(
                f"resource_id {resource_id!r:.60} with tenant {tenant!r:.60} is {size} bytes in "
                f"UTF-8 (its chunk ids hold both), the limit is {MAX_RESOURCE_ID_BYTES}"
            )
    if isinstance(acl, str):
        tags: tuple[Any, ...] = (acl,)
    elif isinstance(acl, Iterable) and not isinstance(acl, Mapping):
        tags = tuple(acl)
    else:
        raise IngestError(
            f"acl of {resource_id!r} must be a list of tags, got {type(acl).__name__}: {acl!r:.80}"
        )
    for tag in tags:
        _check_text_field("acl tag", tag, max_bytes=MAX_ACL_TAG_BYTES, allow_empty=False)
    acl_sorted = tuple(sorted(set(tags)))
    if len(acl_sorted) > MAX_ACL_TAGS:
        raise IngestError(
            f"acl of {resource_id!r} has {len(acl_sorted)} tags, the limit is {MAX_ACL_TAGS}"
        )
    if source_uri is not None:
        _check_text_field(
            "source_uri", source_uri, max_chars=MAX_SOURCE_URI_CHARS, allow_empty=False
        )
    if source_root is not None:
        _check_text_field(
            "source_root", source_root, max_chars=MAX_SOURCE_URI_CHARS, allow_empty=False
        )
    if source_sha256 is not None and not _SHA256.fullmatch(source_sha256):
        raise IngestError(
            f"source_sha256 {source_sha256!r:.80} is not a SHA-256 (64 lower-case hex digits)"
        )
    if metadata is not None and not isinstance(metadata, Mapping):
        raise IngestError(
            f"metadata of {resource_id!r} must be a mapping, got {type(metadata).__name__}: "
            f"{metadata!r:.80}"
        )
    meta = dict(metadata or {})
    metadata_json = _metadata_json(resource_id, meta)
    if fmt not in FORMATS:
        raise IngestError(f"fmt {fmt!r} is not valid; valid: {', '.join(map(repr, FORMATS))}")
    return Document(
        resource_id=resource_id,
        title=title,
        text=text,
        metadata=meta,
        tenant=tenant,
        acl=acl_sorted,
        source_uri=source_uri,
        fmt=fmt,
        source_mtime_ns=source_mtime_ns,
        source_size=source_size,
        source_root=source_root,
        source_sha256=source_sha256,
        content_sha256=hashlib.sha256(text_bytes).hexdigest(),
        metadata_json=metadata_json,
        acl_json=json.dumps(list(acl_sorted), ensure_ascii=False),
    )


def revalidate(item: object, position: int) -> Document:
    """``item`` checked again as :func:`make_document` checks its arguments (a
    :class:`Document` may have been built directly); :class:`IngestError` says why not."""
    if not isinstance(item, Document):
        raise IngestError(
            f"item {position} is a {type(item).__name__}, not a Document (build one with "
            "make_document)"
        )
    return make_document(
        item.resource_id,
        item.text,
        title=item.title,
        metadata=item.metadata,
        tenant=item.tenant,
        acl=item.acl,
        source_uri=item.source_uri,
        fmt=item.fmt,
        source_mtime_ns=item.source_mtime_ns,
        source_size=item.source_size,
        source_root=item.source_root,
        source_sha256=item.source_sha256,
    )


@dataclass
class IngestReport:
    """What an ingest did. ``errors`` maps a resource id or file to the reason it was not
    indexed; ``warnings`` lists what went wrong without losing anything indexed (a cleanup step
    that failed and was left to the reconciler). A folder ingest also gives the ``root`` its ids
    are relative to, the ids it ``pruned`` (their files are gone), the ids it left out as
    ``excluded`` (deleted by hand) and ``notes`` on how ids were chosen."""

    indexed: int = 0
    unchanged: int = 0
    chunks: int = 0
    vectors: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    root: str | None = None
    pruned: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: folder files left out because they were deleted by hand (``hybridsag include`` lifts it)
    excluded: list[str] = field(default_factory=list)

    def merge(self, other: IngestReport) -> None:
        self.indexed += other.indexed
        self.unchanged += other.unchanged
        self.chunks += other.chunks
        self.vectors += other.vectors
        self.errors.update(other.errors)
        self.warnings.extend(other.warnings)
        self.pruned.extend(other.pruned)
        self.notes.extend(other.notes)
        self.excluded.extend(other.excluded)

    def as_dict(self) -> dict[str, Any]:
        return {
            "indexed": self.indexed,
            "unchanged": self.unchanged,
            "chunks": self.chunks,
            "vectors": self.vectors,
            "errors": dict(self.errors),
            "warnings": list(self.warnings),
            "seconds": round(self.seconds, 4),
            "root": self.root,
            "pruned": list(self.pruned),
            "notes": list(self.notes),
            "excluded": list(self.excluded),
        }


