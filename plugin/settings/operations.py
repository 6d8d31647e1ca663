"""The settings of running an index: consistency, document formats, ingest, watched folders and
the MCP server."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from hybridsag.output.budget import DEFAULT_BUDGET, MAX_BUDGET, MIN_BUDGET
from hybridsag.settings.base import Section, named_folder

__all__ = [
    "ConsistencySettings",
    "FormatsSettings",
    "IngestSettings",
    "McpSettings",
    "SourcesSettings",
    "WatchedFolder",
]


class ConsistencySettings(Section):
    """The reconciler (``hybridsag.consistency``): lease, stuck-claim timeout, mass-delete guard,
    batches and retries, schedule (crontab string in ``timezone``, plus up to ``jitter_s`` of
    random delay) and how many audit reports to keep."""

    lease_s: float = Field(600.0, ge=1, le=86_400)
    indexing_timeout_s: float = Field(3600.0, ge=1, le=7 * 86_400)
    max_delete_share: float = Field(0.2, ge=0.0, le=1.0)
    max_delete_count: int = Field(10_000, ge=0)
    batch_size: int = Field(500, ge=1, le=100_000)
    max_retries: int = Field(3, ge=0, le=20)
    # First retry waits backoff_s, then doubling: a retriable DenseError/StoreError of one batch.
    backoff_s: float = Field(0.5, ge=0.0, le=60.0)
    cron: str = "0 3 * * *"
    timezone: str = "UTC"
    jitter_s: int = Field(300, ge=0, le=86_400)
    keep_reports: int = Field(30, ge=1, le=10_000)


class FormatsSettings(Section):
    """PDF, DOCX, HTML and EPUB files in folder ingest (the ``formats`` extra): bounds on what
    one file may cost. A file over a bound is reported and skipped, never cut short.

    ``max_source_mb``: largest source file (MiB) converted; ``max_unpacked_mb``: largest total a
    DOCX or EPUB archive may unpack to (a ZIP bomb is refused before it is read);
    ``max_pdf_pages``: most pages a PDF may have; ``timeout_s``: conversion time of one file,
    checked between pages, chapters and blocks, and the wall time after which the process the
    conversion runs in is killed (one page that stalls inside the parser included);
    ``max_memory_mb``: address space of that process (a file that unpacks into more is
    stopped); ``cache``: keep converted text under ``<data_dir>/cache/converted``.
    """

    max_source_mb: float = Field(50.0, gt=0, le=4096)
    max_unpacked_mb: float = Field(500.0, gt=0, le=65_536)
    max_pdf_pages: int = Field(2000, ge=1, le=1_000_000)
    timeout_s: float = Field(300.0, gt=0, le=86_400)
    max_memory_mb: float = Field(1024.0, ge=256, le=65_536)
    cache: bool = True


class IngestSettings(Section):
    """Bounds on what ingest reads. ``max_file_mb``: the largest file (MiB) read from a folder,
    and the longest JSONL line; a larger one is reported and skipped, never read. A converted
    format (PDF, ...) is also held to ``formats.max_source_mb``."""

    max_file_mb: float = Field(64.0, gt=0, le=4096)


class WatchedFolder(Section):
    """One folder on the service's own disk that ``hybridsag serve`` keeps in sync: its
    ``path`` (a relative one is taken from the working directory the service starts in), the
    ``tenant`` its resources land in and their ``acl`` tags."""

    #: the folder (relative: from the service's working directory)
    path: Path
    #: the tenant its resources land in
    tenant: str = Field("", max_length=256)
    #: the ACL tags its resources get
    acl: tuple[str, ...] = Field((), max_length=256)

    @field_validator("path", mode="before")
    @classmethod
    def _check_path(cls, value: object) -> object:
        return named_folder(value, "a watched folder's path is empty; name a folder")


class SourcesSettings(Section):
    """Folders that the running service (``hybridsag serve``) keeps in sync itself, each a
    ``{path, tenant, acl}`` (``serve --watch DIR`` adds one more, tenant ``""``).

    The service indexes each at start (the files whose size or mtime differ from what it
    recorded), then follows file events (watchfiles: inotify on Linux): events are gathered
    until none came for a moment, at most ``debounce_ms``, and each gathered batch is applied
    through the service's one writer (the changed files read again, the deleted ones pruned);
    every ``rescan_s`` a full rescan (by ``stat``) catches what events missed. A folder may be
    watched once, and not inside another watched folder of the same tenant.
    """

    watch: tuple[WatchedFolder, ...] = ()
    debounce_ms: int = Field(500, ge=10, le=60_000)
    rescan_s: float = Field(600.0, ge=1, le=86_400)

    @model_validator(mode="after")
    def _check(self) -> SourcesSettings:
        folders = [(w.tenant, Path(os.path.abspath(w.path))) for w in self.watch]
        for i, (tenant, a) in enumerate(folders):
            for tenant_b, b in folders[i + 1 :]:
                if tenant == tenant_b and (a == b or a.is_relative_to(b) or b.is_relative_to(a)):
                    raise ValueError(
                        f"sources.watch: {a} and {b} (tenant {tenant!r}) overlap; watch the "
                        "outer folder only"
                    )
        return self


class McpSettings(Section):
    """``hybridsag mcp``, the MCP server over stdio (the ``mcp`` extra).

    ``allow_writes``: in process, also serve the ``ingest`` and ``delete`` tools (they write the
    data dir); through ``--server`` it is not needed: the client token's role decides (a write or
    admin token is offered them, a read token is not);
    ``top_k``: results of a ``search`` call that names none; ``budget``: characters of its agent
    text when the call names none.
    """

    allow_writes: bool = False
    top_k: int = Field(5, ge=1, le=1000)
    budget: int = Field(DEFAULT_BUDGET, ge=MIN_BUDGET, le=MAX_BUDGET)
