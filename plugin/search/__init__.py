"""``HybridSearch``: the public façade over the write path, the recall paths and fusion.

It exposes operations (ingest, delete, disable, enable, search); its parts come from one
:class:`~hybridsag.components.Components` (the composition root), available as
:attr:`HybridSearch.components` to the reconciler, eval and the service that share them.

The package is split by job behind the façade: :mod:`~hybridsag.search.reads` (the read side:
:class:`~hybridsag.search.reads.Searcher` runs the paths, fuses and builds the response),
:mod:`~hybridsag.search.steps` (what the paths gave and the fusion and confidence steps, which
the offline runs call too), :mod:`~hybridsag.search.shown` (one result as a response shows it)
and :mod:`~hybridsag.search.resources` (the resource reads' result types and staleness). The
write side is :mod:`hybridsag.ingest`, which the writing methods import when they run, so that a
search process never loads it. The names below are importable from here, as they were before the
split.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hybridsag.components import Components
from hybridsag.errors import NotFoundError
from hybridsag.paths import PathResult
from hybridsag.records.filters import Filters
from hybridsag.records.keys import resource_key
from hybridsag.records.rows import ChunkRecord, Exclusion, ResourceRecord
from hybridsag.request import ListingOptions, SearchOptions, options_of
from hybridsag.results import SearchResponse
from hybridsag.search.reads import PATH_WORKERS, Searcher
from hybridsag.search.resources import (
    STALE_CHANGED,
    STALE_DELETED,
    STALE_NOT_REGULAR,
    STALE_UNREADABLE,
    ChunkSummary,
    ResourceDetail,
    ResourceSummary,
    stale_reason,
)
from hybridsag.search.steps import (
    FusionInput,
    PathRuns,
    confidence_step,
    fuse_step,
    judge_floor,
    next_hop_slots,
)
from hybridsag.settings import Settings

if TYPE_CHECKING:
    import threading

    # the write side (chunker, folders, sources, writer) is imported by the methods that
    # ingest, so that a search process never loads it
    from hybridsag.documents import Document, Format, IngestReport
    from hybridsag.fusion import ChunkView, Hit
    from hybridsag.ingest.manifest import ManifestEntry, PreparedUpload, SyncNeed
    from hybridsag.ingest.progress import IngestProgress
    from hybridsag.ingest.writer import StepHook
    from hybridsag.judges.base import Judge
    from hybridsag.vectors.contract import DenseIndex
    from hybridsag.vectors.embedder import Embedder

__all__ = [
    "PATH_WORKERS",
    "STALE_CHANGED",
    "STALE_DELETED",
    "STALE_NOT_REGULAR",
    "STALE_UNREADABLE",
    "ChunkSummary",
    "FusionInput",
    "HybridSearch",
    "confidence_step",
    "PathRuns",
    "ResourceDetail",
    "ResourceSummary",
    "fuse_step",
    "judge_floor",
    "next_hop_slots",
    "stale_reason",
]

_MIB = 1024 * 1024


class HybridSearch:
    """Ingest, delete and search over the recall paths, merged by the trust step and convex
    fusion (weighted RRF one setting away).

    Built from ``settings`` (a :class:`~hybridsag.components.Components` is made and owned),
    or over ``components`` someone else owns (then :meth:`close` leaves them open).
    ``embedder``, ``dense_index``, ``judge`` and ``step_hook`` go to the components made here.
    Safe to share between threads: the parts are built once on first use, under locks.

    A resource is ``(tenant, resource_id)`` (:mod:`hybridsag.records.store`): every method that names
    one takes its ``tenant`` (default ``""``, the un-tenanted resources), and results carry it.

    Args:
        settings: What to build the parts from; None: ``Settings()`` (the environment, ``.env``
            and the TOML file). Not with ``components`` unless it is that object's own.
        components: Parts someone else built and owns (the service, eval); :meth:`close`
            leaves them open. ``embedder``, ``dense_index``, ``judge`` and ``step_hook`` are
            not used then.
        embedder: The embedder the components use instead of the one ``embedding`` names.
        dense_index: The dense index the components use instead of the Milvus one.
        judge: The judge used instead of the one ``judge.name`` names.
        step_hook: The write path's crash-injection hook for tests, called at each step of a
            write.

    Raises:
        ValueError: ``settings`` and ``components`` both given, and ``settings`` is not
            ``components.settings``.
        ConfigError: an unknown path name in ``search.paths`` or ``fusion.weights``, an
            unknown ``judge.name``.
        IndexMismatchError: the store was built with another tokenizer.

    >>> hs = HybridSearch(Settings(data_dir=Path("/tmp/hs-doc")))   # doctest: +SKIP
    >>> hs.ingest("faq", "Reset with `E-1234`.", title="FAQ")        # doctest: +SKIP
    >>> hs.search("E-1234").results[0].resource_id                   # doctest: +SKIP
    'faq'
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        components: Components | None = None,
        embedder: Embedder | None = None,
        dense_index: DenseIndex | None = None,
        judge: Judge | None = None,
        step_hook: StepHook | None = None,
    ) -> None:
        if components is not None:
            if settings is not None and settings is not components.settings:
                raise ValueError("give settings or components, not both")
            self.components = components
            self._owns_components = False
        else:
            self.components = Components(
                settings if settings is not None else Settings(),
                embedder=embedder,
                dense_index=dense_index,
                judge=judge,
                step_hook=step_hook,
            )
            self._owns_components = True
        self.settings = self.components.settings
        self._reads = Searcher(self.components)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the path threads (waiting for the searches running) and close the components
        when this object built them."""
        self._reads.close()
        if self._owns_components:
            self.components.close()

    def __enter__(self) -> HybridSearch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes -------------------------------------------------------------------------------

    def ingest(
        self,
        resource_id: str,
        text: str,
        *,
        title: str = "",
        metadata: Mapping[str, Any] | None = None,
        tenant: str = "",
        acl: Iterable[str] = (),
        source_uri: str | None = None,
        fmt: Format = "markdown",
    ) -> IngestReport:
        """Ingest (or re-ingest) one resource; its chunks are replaced atomically.

        Args:
            resource_id: The resource's id within ``tenant`` (non-empty, no leading or trailing
                whitespace, within :data:`~hybridsag.documents.MAX_RESOURCE_ID_BYTES`).
            text: Its text, in ``fmt``.
            title: Its title (the title path searches it; whitespace runs become one space).
            metadata: JSON-like metadata that filters match on (``filters.metadata``).
            tenant: The tenant it belongs to (``""``: un-tenanted).
            acl: Its ACL tags; none: visible to every caller of its tenant.
            source_uri: Where it came from (a file path makes a result's staleness checkable).
            fmt: How ``text`` is chunked: ``"markdown"``, ``"rst"`` or ``"text"``.

        Returns:
            The ingest report (``indexed``, or ``unchanged`` when it was indexed already as
            given; ``chunks``, ``vectors``).

        Raises:
            IngestError: a bad value (:func:`~hybridsag.documents.make_document` names it).
            StoreError, DenseError: a store failed; the batch was undone.
        """
        from hybridsag.documents import make_document

        doc = make_document(
            resource_id,
            text,
            title=title,
            metadata=metadata,
            tenant=tenant,
            acl=acl,
            source_uri=source_uri,
            fmt=fmt,
        )
        return self.components.writer().ingest_many([doc])

    def ingest_documents(
        self,
        docs: Iterable[Document],
        *,
        mode: Literal["sag", "passage"] | None = None,
        progress: IngestProgress | Callable[[int], None] | None = None,
        skip_unchanged: bool = True,
        cancel: threading.Event | None = None,
    ) -> IngestReport:
        """Ingest documents (built with :func:`~hybridsag.documents.make_document`); each is
        checked again on its own, so one bad item is reported in ``errors`` and the others are
        indexed. Once ``cancel`` is set the ingest stops at its next cancellation point, undoes
        the batch in flight and raises :class:`~hybridsag.errors.WriteCancelledError`
        (:meth:`hybridsag.ingest.writer.Writer.ingest_many`).

        Args:
            docs: The documents, in order; read lazily, in batches.
            mode: ``"sag"`` (sentence packing) or ``"passage"`` (one chunk a document); None:
                ``chunking.mode``.
            progress: An :class:`~hybridsag.ingest.progress.IngestProgress`, or a callable
                given the number of documents done.
            skip_unchanged: Leave a resource whose stored content, title, metadata, tenant,
                ACL and source are the same as it is (counted in ``unchanged``); False indexes
                it again.
            cancel: Set it to stop the ingest (the service's shutdown).

        Returns:
            The ingest report; a document refused is in its ``errors``.

        Raises:
            WriteCancelledError: ``cancel`` was set; its ``report`` holds what earlier batches
                committed.
            StoreError, DenseError: a store failed; the batch in flight was undone, earlier
                ones stay committed.
        """
        return self.components.writer().ingest_many(
            docs, mode=mode, progress=progress, skip_unchanged=skip_unchanged, cancel=cancel
        )

    def ingest_jsonl(
        self,
        path: Path,
        *,
        mode: Literal["sag", "passage"] | None = None,
        progress: IngestProgress | Callable[[int], None] | None = None,
    ) -> IngestReport:
        """Ingest a JSONL file (BEIR ``corpus.jsonl`` works as is); bad lines, and lines over
        ``ingest.max_file_mb``, are reported. With ``progress``, the lines are counted first.

        Args:
            path: The JSONL file: one object a line with ``_id``/``id``/``resource_id``,
                ``text`` and optionally ``title``, ``metadata``, ``tenant``, ``acl``,
                ``format``.
            mode: As in :meth:`ingest_documents`.
            progress: As in :meth:`ingest_documents`; ticks once a line.

        Returns:
            The ingest report; a bad line is in its ``errors`` by ``file:line``.

        Raises:
            IngestError: ``path`` does not exist, cannot be read or is not a regular file.
            StoreError, DenseError: as :meth:`ingest_documents`.
        """
        from hybridsag.ingest.progress import as_progress
        from hybridsag.ingest.sources import SourceErrors, count_lines, iter_jsonl

        errors = SourceErrors()
        max_line = int(self.settings.ingest.max_file_mb * _MIB)
        docs = iter_jsonl(Path(path), errors, max_line_bytes=max_line)
        ticks = as_progress(progress)
        if progress is not None:
            ticks.start(count_lines(Path(path)))
        report = self.ingest_documents(docs, mode=mode, progress=ticks)
        report.errors.update(errors.errors)
        return report

    def ingest_folder(
        self,
        path: Path,
        *,
        tenant: str = "",
        acl: Iterable[str] = (),
        progress: IngestProgress | Callable[[int], None] | None = None,
        prune: bool = True,
        only: Collection[Path] | None = None,
        changed_only: bool = False,
        cancel: threading.Event | None = None,
    ) -> IngestReport:
        """Ingest md/markdown/txt/rst files under a folder (.gitignore and hidden skipped), and
        pdf/docx/html/htm/epub files through the ``formats`` extra (converted text cached under
        the data dir; without the extra they are reported as skipped); ``path`` may also name
        one file. Ids are relative to the folder indexed before that holds the file, else to
        the folder named; with ``prune``, resources of the folder whose files are gone are
        deleted (see :mod:`hybridsag.ingest.folders`). Only regular files inside the folder are read,
        each up to ``ingest.max_file_mb``; with ``only`` just the files it names (or holds),
        with ``changed_only`` just those whose stat differs from the one recorded (a file
        watcher's batch, a rescan: :func:`hybridsag.ingest.folders.ingest_path`).

        Args:
            path: The folder, or one file in it.
            tenant: The tenant its resources land in.
            acl: The ACL tags every resource of the folder gets.
            progress: As in :meth:`ingest_documents`; ticks once a file.
            prune: Delete the folder's resources whose files are gone.
            only: Index just these files (or the files these folders hold).
            changed_only: Index just the files whose size or mtime differ from those recorded.
            cancel: As in :meth:`ingest_documents`.

        Returns:
            The ingest report, with the ``root`` the ids are relative to, ``pruned``,
            ``excluded`` and ``notes``.

        Raises:
            IngestError: ``path`` does not exist or is a file of a kind that is not indexed.
            WriteCancelledError, StoreError, DenseError: as :meth:`ingest_documents`.
        """
        from hybridsag.ingest.folders import ingest_path

        components = self.components
        return ingest_path(
            components.store,
            components.writer(),
            self.settings,
            Path(path),
            tenant=tenant,
            acl=tuple(acl),
            progress=progress,
            prune=prune,
            only=only,
            changed_only=changed_only,
            cancel=cancel,
        )

    def sync_need(
        self,
        root: str,
        files: Sequence[ManifestEntry],
        *,
        tenant: str = "",
        acl: Sequence[str] = (),
        max_upload_bytes: int,
        visible: Callable[[ResourceRecord], bool] | None = None,
    ) -> SyncNeed:
        """Step 1 of a folder sync through the service: which files of a client's folder
        manifest are needed (:func:`hybridsag.ingest.manifest.sync_need`); writes nothing.

        Args:
            root: The client's folder, as the client names it (the ids are relative to it).
            files: The manifest: each file's path under ``root``, size, mtime and SHA-256.
            tenant: The tenant the folder's resources belong to.
            acl: The ACL tags they get.
            max_upload_bytes: The largest file the client may send (``server.max_body_bytes``);
                a larger one is reported as skipped.
            visible: Whether the caller may see a resource (a token's scope); None: every one.

        Returns:
            The files needed, those unchanged or held, the errors and the id root.

        Raises:
            InputError: a bad root or path.
        """
        from hybridsag.ingest.manifest import sync_need

        return sync_need(
            self.components.store, self.settings, root=root, files=files, tenant=tenant,
            acl=acl, max_upload_bytes=max_upload_bytes, visible=visible,
        )

    def prepare_upload(
        self,
        root: str,
        path: str,
        data: bytes,
        *,
        sha256: str,
        tenant: str = "",
        acl: Sequence[str] = (),
        visible: Callable[[ResourceRecord], bool] | None = None,
        cancel: threading.Event | None = None,
    ) -> PreparedUpload:
        """Step 2, first half: one uploaded file of a synced folder made into its document as
        an in-process index would, converted in its bounded process; writes nothing
        (:func:`hybridsag.ingest.manifest.prepare_upload`).

        Args:
            root: The synced folder, as in :meth:`sync_need`.
            path: The file's path under ``root``.
            data: The file's bytes.
            sha256: Their SHA-256 as the client computed it (hex).
            tenant: As in :meth:`sync_need`.
            acl: As in :meth:`sync_need`.
            visible: As in :meth:`sync_need`.
            cancel: Set it to stop a conversion.

        Returns:
            The document to index, or the report of why not, for :meth:`apply_upload`.

        Raises:
            InputError: a bad root, path or hash, or bytes whose SHA-256 is not ``sha256``.
            ForbiddenError: its resource is one the caller may not see.
            WriteCancelledError: ``cancel`` was set while converting.
        """
        from hybridsag.ingest.manifest import prepare_upload

        return prepare_upload(
            self.components.store, self.settings, root=root, path=path, sha256=sha256,
            data=data, tenant=tenant, acl=acl, visible=visible, cancel=cancel,
        )

    def apply_upload(
        self,
        prepared: PreparedUpload,
        *,
        visible: Callable[[ResourceRecord], bool] | None = None,
        cancel: threading.Event | None = None,
    ) -> IngestReport:
        """Step 2, second half: the prepared upload checked again and indexed by the writer
        (:func:`hybridsag.ingest.manifest.apply_upload`).

        Args:
            prepared: What :meth:`prepare_upload` made of the file.
            visible: As in :meth:`sync_need`.
            cancel: As in :meth:`ingest_documents`.

        Returns:
            The ingest report of the upload.

        Raises:
            ForbiddenError: its resource is now one the caller may not see.
            StoreError, DenseError, WriteCancelledError: from the write path.
        """
        from hybridsag.ingest.manifest import apply_upload

        components = self.components
        return apply_upload(
            components.store, components.writer(), prepared, visible=visible, cancel=cancel
        )

    def sync_commit(
        self,
        root: str,
        paths: Collection[str],
        *,
        tenant: str = "",
        prune: bool = True,
        visible: Callable[[ResourceRecord], bool] | None = None,
    ) -> IngestReport:
        """Step 3: prune what a synced folder no longer holds
        (:func:`hybridsag.ingest.manifest.sync_commit`).

        Args:
            root: The synced folder, as in :meth:`sync_need`.
            paths: Every file the client's folder still holds, relative to ``root``.
            tenant: As in :meth:`sync_need`.
            prune: Delete the resources of ``tenant`` under ``root`` that ``paths`` does not
                name; none when ``paths`` is empty.
            visible: As in :meth:`sync_need`; a resource the caller may not see is left alone.

        Returns:
            The ingest report, the deleted ids in ``pruned``.

        Raises:
            InputError: a bad root or path.
            StoreError, DenseError: from the write path (what was pruned before stays pruned).
        """
        from hybridsag.ingest.manifest import sync_commit

        components = self.components
        return sync_commit(
            components.store, components.writer(), root=root, paths=paths, tenant=tenant,
            prune=prune, visible=visible,
        )

    def delete(self, resource_id: str, *, tenant: str = "") -> bool:
        """Delete the resource ``resource_id`` of ``tenant`` on every path; False when it did
        not exist (another tenant's resource of that id is another resource, left alone).

        A folder resource whose file still exists stays deleted: the file is excluded from
        its folder (listed by :meth:`exclusions`), so the next index of the folder leaves it
        out, until :meth:`include` lifts it.

        Args:
            resource_id: The resource's id.
            tenant: Its tenant.

        Returns:
            True when it was deleted, False when it did not exist.
        """
        return self.components.writer().delete(resource_key(resource_id, tenant), exclude=True)

    def exclusions(
        self, *, tenant: str | None = None, resource_id: str | None = None
    ) -> list[Exclusion]:
        """The folder files deleted by hand while they stayed on disk, kept out of their
        folders' index (of exact ``tenant`` and id ``resource_id`` when given).

        Args:
            tenant: Only this tenant's; None: every tenant's.
            resource_id: Only the file of this id; None: all.
        """
        return self.components.store.exclusions(tenant=tenant, resource_id=resource_id)

    def include(self, resource_id: str, *, tenant: str = "") -> IngestReport:
        """Lift the exclusion of the folder file ``resource_id`` of ``tenant`` and index the
        file again (its root, the ACL it had), as its folder's index would
        (:func:`hybridsag.ingest.folders.include_file`).

        Args:
            resource_id: The excluded file's resource id.
            tenant: Its tenant.

        Returns:
            The ingest report of the file.

        Raises:
            NotFoundError: no file of that id is excluded.
        """
        from hybridsag.ingest.folders import include_file

        parts = self.components
        lifted, report = include_file(
            parts.store, parts.writer(), self.settings, resource_id, tenant=tenant
        )
        if not lifted:
            raise NotFoundError(
                f"no excluded file {resource_id!r}"
                + (f" of tenant {tenant!r}" if tenant else "")
                + "; hybridsag list --excluded shows them"
            )
        return report

    def disable(self, resource_id: str, *, tenant: str = "") -> bool:
        """Hide the resource ``resource_id`` of ``tenant`` from every search, keeping it; False
        when it does not exist.

        Args:
            resource_id: The resource's id.
            tenant: Its tenant.
        """
        return self.components.writer().set_enabled(resource_key(resource_id, tenant), False)

    def enable(self, resource_id: str, *, tenant: str = "") -> bool:
        """Make a disabled resource ``resource_id`` of ``tenant`` searchable again; False when
        it does not exist.

        Args:
            resource_id: The resource's id.
            tenant: Its tenant.
        """
        return self.components.writer().set_enabled(resource_key(resource_id, tenant), True)

    # -- resources ----------------------------------------------------------------------------

    def list_resources(
        self, options: ListingOptions | None = None, **keywords: Any
    ) -> list[ResourceSummary]:
        """Resources, oldest first, with their chunk counts; filtered by exact ``tenant``,
        ``status`` and an id ``prefix``; at most ``limit``.

        Args:
            options: What to list (:class:`~hybridsag.request.ListingOptions`: tenant,
                status, prefix, limit), checked when built; None: every resource.
            keywords: Fields of :class:`~hybridsag.request.ListingOptions`, which build it
                (or replace those fields of ``options``): ``hs.list_resources(limit=3)``.

        Raises:
            InputError: an unknown status, or a limit that is not a positive integer.
            TypeError: a keyword that is no field of the options.
        """
        o = options_of(ListingOptions, options, keywords)
        rows = self.components.store.list_resources(
            tenant=o.tenant, statuses=o.statuses, prefix=o.prefix, limit=o.limit
        )
        return [ResourceSummary(record, chunks) for record, chunks in rows]

    def get_resource(self, resource_id: str, *, tenant: str = "") -> ResourceDetail | None:
        """The record of the resource ``resource_id`` of ``tenant`` and a summary of its current
        chunks; ``None`` when there is no such resource.

        Args:
            resource_id: The resource's id.
            tenant: Its tenant.
        """
        store = self.components.store
        record = store.get_resource(resource_id, tenant=tenant)
        if record is None:
            return None
        chunks = tuple(
            ChunkSummary(
                c.chunk_id, c.ordinal, c.heading_path, c.start_line, c.end_line, len(c.text)
            )
            for c in store.resource_chunks(resource_id, tenant=tenant)
        )
        reason = stale_reason(record)
        return ResourceDetail(record, chunks, stale=reason is not None, stale_reason=reason)

    # -- reads of the system of record ---------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Resources (in all and per status), chunks and tombstones in the store."""
        return self.components.store.counts()

    def resource(self, resource_id: str, *, tenant: str = "") -> ResourceRecord | None:
        """The stored record of the resource ``resource_id`` of ``tenant`` (any status), or
        None.

        Args:
            resource_id: The resource's id.
            tenant: Its tenant.
        """
        return self.components.store.get_resource(resource_id, tenant=tenant)

    def resource_chunks(self, resource_id: str, *, tenant: str = "") -> list[ChunkRecord]:
        """The chunks of the current version of the resource ``resource_id`` of ``tenant``, in
        order (none when there is no such resource).

        Args:
            resource_id: The resource's id.
            tenant: Its tenant.
        """
        return self.components.store.resource_chunks(resource_id, tenant=tenant)

    # -- search -------------------------------------------------------------------------------

    def resolve_paths(self, paths: Sequence[str] | str | None) -> tuple[str, ...]:
        """The paths a search runs: ``paths`` (a list, or a comma-separated string) or
        ``search.paths``; paths that need the dense side are left out while it is off.
        QueryError names an unknown path and lists the registered ones.

        Args:
            paths: Path names (:data:`~hybridsag.paths.PATHS`), as a sequence or a
                comma-separated string; None or empty: ``search.paths``.

        Returns:
            The names in order, each once.

        Raises:
            QueryError: an unknown path, or no path left to run.
        """
        return self._reads.resolve_paths(paths)

    def warm(
        self, paths: Sequence[str] | str | None = None, *, query: str = ""
    ) -> dict[str, float]:
        """Build now what a search over ``paths`` needs, so that its first search pays no
        start-up: jieba's dictionary when ``query`` holds Han text, the Milvus index when a path
        needs the dense side, the embedding model when that path can run or a path reads the
        passage vectors (a judge embeds the query), then every path (and its judge). When a
        path reads the passage vectors the model is needed whatever Milvus does, so it loads in
        a pool thread while Milvus opens, and embeds ``query`` (a valid one) there too: the
        search takes that vector from the embedder's query memo. Returns the milliseconds of
        each step as the caller waits for it (``tokenizer_ms``, ``milvus_ms``, ``model_ms``:
        the wait for the model after Milvus opened, ``paths_ms``), so that they add up to the
        call's wall time. A part that cannot be built is left for the search to report: it
        degrades there as it would have without this call.

        Args:
            paths: As in :meth:`resolve_paths`.
            query: A query whose script and vector to warm for (``""``: none).

        Raises:
            QueryError: an unknown path.
        """
        return self._reads.warm(paths, query=query)

    def run_path(self, name: str, query: str, *, limit: int, filters: Filters) -> PathResult:
        """Run one path alone (validated query), as eval does: under the search's remote budget,
        with what its remote models did in ``usage["remote"]`` (and ``usage["remote_budget"]``
        with a budget), as :meth:`search` reports them.

        Args:
            name: The path's name (:data:`~hybridsag.paths.PATHS`).
            query: The query, already validated.
            limit: How many hits to return at most.
            filters: Who may see what, applied inside the path's own query.

        Raises:
            HybridSagError: what the path raised (a search would leave it out instead).
        """
        return self._reads.run_path(name, query, limit=limit, filters=filters)

    def search(
        self, query: str, options: SearchOptions | None = None, **keywords: Any
    ) -> SearchResponse:
        """Run the enabled paths concurrently and fuse them.

        What the search does besides the query is one :class:`~hybridsag.request.SearchOptions`,
        checked when it was built (the faces build it and pass it whole). Its fields may also be
        given as keywords, a shorthand that builds it here: ``hs.search(q, top_k=5)`` is
        ``hs.search(q, SearchOptions(top_k=5))``; keywords given with ``options`` replace those
        fields of it.

        Every response carries ``confidence``, the calibrated probability that its top result
        answers the query (:func:`confidence_step`; 0 when nothing was found), and
        ``no_good_match`` when the confidence model's match, the probability that the index
        holds an answer at all (:meth:`~hybridsag.fusion.confidence.ConfidenceModel.predict_match`),
        is below ``search.no_match_below``. With ``min_confidence``
        (0..1) a response whose confidence is below it returns no results: ``withheld`` says
        why, and the confidence is still given.

        ``weights`` and ``judge_order`` override ``fusion.weights`` and ``fusion.judge_order``
        for this call (an A/B test without a second instance).

        A result whose source file changed on disk since it was indexed (:func:`stale_reason`)
        is *stale*. With ``include_stale`` (default ``search.include_stale``, on) it is shown
        with ``stale`` and ``stale_reason`` set; with it off it is held back, and the response
        counts it in ``stale_hidden`` with its ids in ``stale_hidden_ids``: no result is ever
        dropped without a word.

        ``filters`` that name no tenant and no ACL tags are unscoped: every tenant's and every
        ACL-tagged resource can be returned. This in-process API is the admin view; the HTTP
        service forces a tenant token's tenant and tags into the filters.

        A path that fails is left out and the response is marked ``degraded`` with the reason.

        Remote models (an HTTP embedder, a remote judge) are metered for the whole search:
        ``usage["remote"]`` gives, per remote (``embedder/tei``, ``judge/reranker``, ...), its
        model, HTTP calls, retries, milliseconds, tokens where the endpoint reports them and
        answers taken from a cache; with ``search.remote_budget_calls`` or ``_ms`` set,
        ``usage["remote_budget"]`` says what was used, and a spent budget degrades the search
        (the judge keeps what it had, the dense path is left out) instead of failing it.

        Args:
            query: The query: a non-empty string of at most ``query.max_chars`` characters
                with no control character but tab and newlines (it is stripped).
            options: The search's options (:class:`~hybridsag.request.SearchOptions`: top_k,
                paths, filters, explain, include_stale, weights, judge_order,
                min_confidence); None: every one at its default (the settings').
            keywords: Fields of :class:`~hybridsag.request.SearchOptions`, which build it
                (or replace those fields of ``options``); an unknown one is a TypeError.

        Returns:
            The ranked results with the timings, paths, trust decision and confidence.

        Raises:
            QueryError: a bad query or path name (:class:`~hybridsag.request.QueryValueError`
                for bad options: ``top_k``, filter, weight, ``judge_order`` or
                ``min_confidence``).
            TypeError: a keyword that is no field of the options.
            JudgeError: the judge failed under ``judge.on_failure = "raise"``.
        """
        return self._reads.search(query, options_of(SearchOptions, options, keywords))

    def run_paths(
        self, names: Sequence[str], query: str, *, limit: int, filters: Filters
    ) -> PathRuns:
        """Run the paths ``names`` concurrently for an already validated ``query``, as a search
        does before fusing. A path that joins others (:attr:`PathSpec.joins`: SAG2 takes the
        dense path's top hits into its judged pool) gets their hits as ``peers`` when they run
        in the same search. A path that fails is left out with the reason in ``reasons``,
        whatever it raised (an exception outside the :class:`HybridSagError` tree is a bug of
        that path: it is logged with its traceback and reported as ``unexpected ...``); a
        :class:`QueryError`, and a :class:`JudgeError` under ``judge.on_failure = "raise"``,
        propagate.

        Args:
            names: The paths to run, already resolved (:meth:`resolve_paths`).
            query: The query, already validated.
            limit: How many hits each path returns at most.
            filters: Who may see what, applied inside each path's own query.

        Returns:
            Each path's hits, timings, stage timings, usage and failure reasons.

        Raises:
            QueryError: a path refused the query.
            JudgeError: the judge failed under ``judge.on_failure = "raise"``.
        """
        return self._reads.run_paths(names, query, limit=limit, filters=filters)

    def visible_chunks(
        self, runs: Mapping[str, Sequence[Hit]], filters: Filters
    ) -> dict[str, ChunkView]:
        """What fusion may see of the runs' chunks (ranks up to ``fusion.depth``): a
        :class:`ChunkView` of each chunk whose resource still exists and passes ``filters``
        (the post-fusion check), read in one statement with its stored facts
        (:meth:`~hybridsag.records.store.Store.chunk_views`). A view's ``resource_id`` is the
        resource's key (:func:`~hybridsag.records.store.resource_key`: the id in tenant
        ``""``), so that fusion never takes two tenants' resources of one id for one. The
        records a response shows are read after fusion, for the hits it shows.

        Args:
            runs: Path name -> its hits.
            filters: Who may see what; a chunk its resource fails is left out.

        Returns:
            Chunk id -> its view, for the visible chunks.
        """
        return self._reads.visible_chunks(runs, filters)

    def fusion_input(
        self, names: Sequence[str], query: str, ran: PathRuns, filters: Filters, *, facts: bool
    ) -> FusionInput:
        """What the fusion step reads of ``ran``, the runs of the paths ``names`` for the
        validated ``query`` (a search and every offline capture build it here): the visible
        chunks, the trust step's query facts when ``facts`` (:func:`hybridsag.paths.query_facts.query_facts`,
        the embedder asked only when an embedding path ran; timed as ``trust_ms``), the paths a
        tenant filter hides.

        Args:
            names: The paths that ran (:meth:`run_paths`' ``names``).
            query: The validated query.
            ran: What :meth:`run_paths` returned.
            filters: Who may see what, as the paths applied it.
            facts: Measure the trust step's query facts (``fusion.trust`` on).

        Returns:
            What :func:`fuse_step` reads.
        """
        return self._reads.fusion_input(names, query, ran, filters, facts=facts)
