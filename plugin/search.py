"""``HybridSearch``: the public façade over the write path, the recall paths and fusion.

It exposes operations (ingest, delete, disable, enable, search); its parts come from one
:class:`~hybridsag.components.Components` (the composition root), available as
:attr:`HybridSearch.components` to the reconciler, eval and the service that share them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hybridsag.components import Components
from hybridsag.errors import (
    BudgetError,
    HybridSagError,
    JudgeError,
    NotFoundError,
    QueryError,
)
from hybridsag.fusion import RULE_REASONS, ChunkView, FusedHit, Hit, QueryFacts, Trust, assess
from hybridsag.fusion import TrustModel, fuse, monotone_scores
from hybridsag.fusion.confidence import ConfidenceModel, confidence_features, coverage
from hybridsag.paths import PATHS, PathResult, path_kinds, path_names, path_spec
from hybridsag.output.agent import copy_place, more_words
from hybridsag.paths.evidence import reads_multi_hop
from hybridsag.paths.query import validate_query
from hybridsag.remote_calls import QueryMeter, metered, submit
from hybridsag.request import SearchOptions, check_listing
from hybridsag.results import SearchResponse, SearchResult
from hybridsag.settings import FusionSettings, Settings
from hybridsag.records.filters import Filters
from hybridsag.records.keys import resource_key
from hybridsag.records.rows import ChunkRecord, Exclusion, ResourceRecord
from hybridsag.lexical.tokenizer import Tokenizer, has_cjk
from hybridsag.paths.query_facts import query_facts

if TYPE_CHECKING:
    import threading

    # the write side (chunker, folders, sources, writer) is imported by the methods that
    # ingest, so that a search process never loads it
    from hybridsag.vectors.contract import DenseIndex
    from hybridsag.documents import Document, Format, IngestReport
    from hybridsag.vectors.embedder import Embedder
    from hybridsag.judges.base import Judge
    from hybridsag.ingest.manifest import ManifestEntry, PreparedUpload, SyncNeed
    from hybridsag.ingest.progress import IngestProgress
    from hybridsag.ingest.writer import StepHook

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
    "next_hop_slots",
    "stale_reason",
]

log = logging.getLogger(__name__)

#: Threads of the pool the paths of concurrent searches share.
PATH_WORKERS = 4
_MIB = 1024 * 1024

#: Why a folder resource is stale (:func:`stale_reason`; ``SearchResult.stale_reason``): its
#: file's size or mtime differ from what was indexed, it is gone, it is no longer a regular
#: file, or it cannot be looked at (a folder on its path lost its permissions).
STALE_CHANGED = "changed on disk"
STALE_DELETED = "deleted on disk"
STALE_NOT_REGULAR = "no longer a regular file on disk"
STALE_UNREADABLE = "unreadable on disk"
#: What a result's ``why`` says of each reason.
_STALE_WHY = {
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


@dataclass
class PathRuns:
    """What :meth:`HybridSearch.run_paths` gives fusion: each path's hits, wall time (ms),
    stage timings, usage, and the reason of each path that failed or degraded."""

    runs: dict[str, list[Hit]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FusionInput:
    """What the fusion step reads of one query (:meth:`HybridSearch.fusion_input`): the
    validated query, each path's hits, the chunks fusion may see, the trust step's query facts
    (``None`` when it was not asked for), the paths whose corpus-wide scores a
    tenant-scoped search hides, and the question's shape as the judged path's evidence
    selection read it (its ``usage["shape"]``: ``"open"``, ``"entity+bridge"``,
    ``"comparison"``, ...; ``None`` when no judged path ran or it selected no evidence), from
    which :func:`fuse_step` decides the next-hop slots
    (:func:`~hybridsag.paths.evidence.reads_multi_hop`)."""

    query: str
    runs: Mapping[str, Sequence[Hit]]
    views: Mapping[str, ChunkView]
    facts: QueryFacts | None = None
    hidden: frozenset[str] = frozenset()
    shape: str | None = None

    def __setstate__(self, state: Sequence[Any]) -> None:
        # a capture pickled before a field was added (hybridsag.evaluation.tuning caches them)
        # holds fewer values: the fields it lacks take their defaults
        values = dict(zip((f.name for f in fields(self)), state))
        for f in fields(self):
            object.__setattr__(self, f.name, values.get(f.name, f.default))


def fuse_step(
    fusion_in: FusionInput,
    fusion: FusionSettings,
    model: TrustModel,
    *,
    weights: Mapping[str, float] | None = None,
    judge_order: bool | None = None,
    limit: int | None = None,
) -> tuple[list[FusedHit], Trust | None]:
    """The fusion step of a search, which every offline run calls too
    (:mod:`hybridsag.evaluation.offline_runs`), so that what they score is what a search returns: with
    ``fusion.trust`` on, :func:`hybridsag.fusion.assess` under ``model`` weighs the paths from
    ``weights`` (default ``fusion.weights``); then :func:`hybridsag.fusion.fuse` with
    ``fusion``'s options (``judge_order`` overrides its own), by rank (RRF) when a path's
    scores are hidden, and only its first ``limit`` hits (``None``: all); with
    ``fusion.next_hop_slots = "multi-hop"`` the next-hop slots hold only for a question
    ``fusion_in.shape`` reads as multi-hop (:func:`~hybridsag.paths.evidence.reads_multi_hop`).
    Returns the ruled hits and the trust decision (``None`` with the step off). ValueError: the
    step is on and ``fusion_in.facts`` is ``None``, or a bad option."""
    chosen = fusion.weights if weights is None else weights
    trust = None
    if fusion.trust:
        if fusion_in.facts is None:
            raise ValueError("the trust step is on but the fusion input carries no query facts")
        kinds = path_kinds(list(fusion_in.runs))
        trust = assess(fusion_in.runs, kinds, fusion_in.facts, weights=chosen, model=model)
    options = fusion.options(weights=chosen, judge_order=judge_order)
    if fusion_in.hidden:
        options["method"] = "rrf"
    fused = fuse(
        fusion_in.runs,
        query=fusion_in.query,
        chunks=fusion_in.views,
        trust=trust,
        next_hop=next_hop_slots(fusion_in, fusion),
        limit=limit,
        **options,
    )
    return fused, trust


def next_hop_slots(fusion_in: FusionInput, fusion: FusionSettings) -> bool:
    """Whether the next-hop slots may hold for this query: always with
    ``fusion.next_hop_slots = "always"``, else when the judged path's evidence selection read
    the question as multi-hop, or read nothing (:func:`~hybridsag.paths.evidence.reads_multi_hop`
    of ``fusion_in.shape``)."""
    return fusion.next_hop_slots == "always" or reads_multi_hop(fusion_in.shape)


def confidence_step(
    fusion_in: FusionInput,
    fused: Sequence[FusedHit],
    trust: Trust | None,
    fusion: FusionSettings,
    tokenizer: Tokenizer,
    model: ConfidenceModel,
) -> tuple[float | None, dict[str, float] | None]:
    """The confidence of a response (:mod:`hybridsag.fusion.confidence`), which the fit
    (``scripts/fit_confidence.py``) computes the same way from captured runs: the features of
    the fused hits ``fused`` (in their shown order) and the ``trust`` decision that
    :func:`fuse_step` made for ``fusion_in`` under ``fusion``, the query's terms as the
    lexical index searched them (the query facts' ``searched_terms``: a misspelt word
    respelled; without facts ``tokenizer``'s
    :meth:`~hybridsag.lexical.tokenizer.Tokenizer.query_terms`) looked up among the top
    result's title, heading and text tokens; then ``model``'s probability, rounded to 4
    places. Returns ``(confidence, features)``, ``(None, None)`` for no result. No model is
    called: everything read was computed by the paths and the trust step."""
    if not fused:
        return None, None
    view = fusion_in.views.get(fused[0].chunk_id)
    facts = fusion_in.facts
    # the terms as the index was searched for them (a misspelt word respelled) when measured
    terms = (
        list(facts.searched_terms)
        if facts is not None and facts.searched_terms
        else tokenizer.query_terms(fusion_in.query)
    )
    found = (
        tokenizer.tokenize(f"{view.title}\n{view.heading_path}\n{view.text}")
        if view is not None
        else ()
    )
    features = confidence_features(
        fusion_in.query,
        fused,
        fusion_in.runs,
        path_kinds(list(fusion_in.runs)),
        fusion_in.views,
        facts=fusion_in.facts,
        trust=trust,
        term_coverage=coverage(terms, found),
        by_rank=fusion.method == "rrf" or bool(fusion_in.hidden),
    )
    if features is None:
        return None, None
    return round(model.predict(features), 4), features


def _hits_of(future: Future[tuple[PathResult, float]]) -> list[Hit]:
    """The hits of a path run in the pool, or its error: a :class:`HybridSagError` as it was
    raised, anything else (a path that broke its contract) wrapped in one, so a path that
    joins it only ever sees the error tree (:data:`~hybridsag.paths.base.Peers`)."""
    try:
        return list(future.result()[0].hits)
    except HybridSagError:
        raise
    except Exception as exc:  # noqa: BLE001 - logged with its traceback by run_paths
        raise HybridSagError(f"unexpected {type(exc).__name__}: {exc}") from exc


def _path_failure(name: str, exc: BaseException) -> str:
    """The reason a path is left out of a search, logged once here: a
    :class:`HybridSagError` as a warning, anything else (a bug: a path must raise nothing
    outside the error tree) as an error with its traceback."""
    if isinstance(exc, HybridSagError):
        reason = f"{type(exc).__name__}: {exc}"
        log.warning("path %s left out of the search: %s", name, reason)
    else:
        reason = f"unexpected {type(exc).__name__}: {exc}"
        log.error("path %s left out of the search: %s", name, reason, exc_info=exc)
    return reason


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
        self._pool = ThreadPoolExecutor(
            max_workers=PATH_WORKERS, thread_name_prefix="hybridsag-path"
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the path threads (waiting for the searches running) and close the components
        when this object built them."""
        self._pool.shutdown(wait=True)
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
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        prefix: str | None = None,
        limit: int | None = None,
    ) -> list[ResourceSummary]:
        """Resources, oldest first, with their chunk counts; filtered by exact ``tenant``,
        ``status`` and an id ``prefix``; at most ``limit``.

        Args:
            tenant: Only this tenant's; None: every tenant's.
            status: Only resources in this status (one of
                :data:`~hybridsag.records.store.STATUSES`); None: any.
            prefix: Only ids that start with it.
            limit: At most this many (a positive integer); None: all.

        Raises:
            InputError: an unknown status, or a limit that is not a positive integer.
        """
        check_listing(status, limit)
        rows = self.components.store.list_resources(
            tenant=tenant, statuses=(status,) if status else None, prefix=prefix, limit=limit
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
        if isinstance(paths, str):
            chosen: tuple[str, ...] = tuple(p.strip() for p in paths.split(",") if p.strip())
        else:
            chosen = tuple(paths) if paths else self.settings.search.paths
        for name in chosen:
            if name not in PATHS:
                raise QueryError(f"unknown path {name!r}; valid: {', '.join(path_names())}")
        if not self.components.dense_enabled:
            chosen = tuple(p for p in chosen if not PATHS[p].needs_dense)
        if not chosen:
            raise QueryError("no retrieval path enabled")
        return tuple(dict.fromkeys(chosen))

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
        names = self.resolve_paths(paths)
        parts = self.components
        spent: dict[str, float] = {}
        if has_cjk(query):
            spent["tokenizer_ms"] = round(parts.tokenizer.warm() * 1000, 3)
        t0 = time.perf_counter()
        dense = any(PATHS[name].needs_dense for name in names)
        vectors = parts.dense_enabled and any(PATHS[name].reads_vectors for name in names)
        model: Future[None] | None = None
        if vectors:  # started first: it overlaps the Milvus open
            model = self._pool.submit(self._warm_model, query)
        milvus_ok = True
        if dense:
            try:  # opens Milvus (loads the model only when no dimension is recorded)
                parts.dense_index()
            except HybridSagError:
                milvus_ok = False  # the dense path fails in the search and says why
            t1 = time.perf_counter()
            spent["milvus_ms"] = round((t1 - t0) * 1000, 3)
            t0 = t1
        if model is None and dense and milvus_ok:  # the query embedding of the dense path
            model = self._pool.submit(self._warm_model, query)
        if model is not None:
            model.result()
            t1 = time.perf_counter()
            spent["model_ms"] = round((t1 - t0) * 1000, 3)
            t0 = t1
        for name in names:
            try:
                parts.retriever(name)
            except HybridSagError:
                pass
        spent["paths_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        return spent

    def _warm_model(self, query: str) -> None:
        """Load the embedding model and embed ``query`` when it is a valid one (the vector
        stays in the embedder's query memo for the search); a failure is left for the search
        to report."""
        try:
            embedder = self.components.embedder()
            embedder.dimension  # noqa: B018 - loads the model
            if query:
                text = validate_query(query, max_chars=self.settings.query.max_chars)
                embedder.encode([text], kind="query")
        except HybridSagError:
            pass

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
        with metered(self._meter()) as meter:
            result = self.components.retriever(name).retrieve(query, limit=limit, filters=filters)
        usage = _with_remote(result.usage, meter)
        if usage is result.usage:
            return result
        return PathResult(result.hits, result.timings, usage, result.degraded)

    def _meter(self) -> QueryMeter:
        """A fresh meter with the search's remote budget (``search.remote_budget_*``)."""
        s = self.settings.search
        return QueryMeter(max_calls=s.remote_budget_calls, max_ms=s.remote_budget_ms)

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
        t_start = time.perf_counter()
        if options is None:
            options = SearchOptions(**keywords)
        elif keywords:
            options = replace(options, **keywords)  # checked again, as built
        s = self.settings
        query = validate_query(query, max_chars=s.query.max_chars)
        top_k = s.search.top_k if options.top_k is None else options.top_k
        flt = options.scope()
        names = self.resolve_paths(options.paths)
        fusion_weights = s.fusion.weights if options.weights is None else options.weights
        judge_order = options.judge_order
        min_confidence = options.min_confidence
        explain = options.explain
        include_stale = (
            s.search.include_stale if options.include_stale is None else options.include_stale
        )
        depth = max(s.fusion.depth, top_k)
        with metered(self._meter()) as meter:  # every remote call is made by a path
            ran = self.run_paths(names, query, limit=depth, filters=flt)
        timings, reasons = ran.timings, ran.reasons
        t_fuse = time.perf_counter()
        fusion_in = self.fusion_input(names, query, ran, flt, facts=s.fusion.trust)
        model = self.components.trust_model()
        # the hits a response shows (the confidence reads the first two); more are fused
        # only when stale files hold some of them back (below)
        window = max(top_k, 2)
        step = partial(
            fuse_step, fusion_in, s.fusion, model, weights=fusion_weights, judge_order=judge_order
        )
        ruled, trust = step(limit=window)
        hidden = fusion_in.hidden
        # the confidence is part of the fusion step's time (it reads what fusion made)
        model = self.components.confidence_model()
        confidence, features = confidence_step(
            fusion_in, ruled, trust, s.fusion, self.components.tokenizer, model
        )
        # nothing found: no top result answers the query, and nothing matches it
        match = 0.0 if features is None else model.predict_match(features)
        if confidence is None:
            confidence = 0.0
        timings["fusion_ms"] = round((time.perf_counter() - t_fuse) * 1000, 3)
        shown: list[tuple[FusedHit, str | None, dict[str, ChunkRecord]]] = []
        hidden_stale: list[dict[str, Any]] = []
        reasons_of: dict[str, str | None] = {}  # one stat per resource
        for f, rec, resources, records in self._shown(ruled, top_k, flt, step, window):
            if rec.key not in reasons_of:
                reasons_of[rec.key] = stale_reason(resources[rec.key])
            stale = reasons_of[rec.key]
            if stale is not None and not include_stale:
                hidden_stale.append(
                    {
                        "chunk_id": rec.chunk_id,
                        "resource_id": rec.resource_id,
                        "tenant": rec.tenant,
                        "reason": stale,
                    }
                )
                continue
            shown.append((f, stale, records))
            if len(shown) >= top_k:
                break
        listed = {c for f, _stale, _recs in shown for c in (f.chunk_id, *f.merged)}
        one_hop = None if next_hop_slots(fusion_in, s.fusion) else fusion_in.shape
        results = [
            self._result(
                rank,
                f,
                [records[c] for c in (f.chunk_id, *f.merged) if c in records],
                stale,
                explain,
                s.search.max_text_chars,
                trust,
                hidden,
                _places([records[c] for c in f.duplicates if c in records]),
                more=tuple(
                    _copy_of(records[c]) for c in f.capped if c in records and c not in listed
                ),
                score=score,
                one_hop=one_hop,
            )
            for rank, ((f, stale, records), score) in enumerate(
                zip(shown, monotone_scores([f.score for f, _stale, _recs in shown])), start=1
            )
        ]
        withheld = None
        if min_confidence is not None and results and confidence < min_confidence:
            withheld = (
                f"confidence {confidence:.4f} is below min_confidence {min_confidence:g}: "
                f"{len(results)} result{'' if len(results) == 1 else 's'} withheld"
            )
            results = []
        timings["total_ms"] = round((time.perf_counter() - t_start) * 1000, 3)
        return SearchResponse(
            query=query,
            results=tuple(results),
            timings=timings,
            paths=names,
            degraded=bool(reasons),
            reasons=reasons,
            usage=_with_remote(ran.usage, meter),
            stages=ran.stages,
            trust=_trust_summary(trust, signals=not hidden),
            stale_hidden=len(hidden_stale),
            stale_hidden_ids=tuple(hidden_stale),
            confidence=confidence,
            no_good_match=match < s.search.no_match_below,
            withheld=withheld,
        )

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
        futures: dict[str, Future[tuple[PathResult, float]]] = {}
        # the joined paths are submitted first: a pool task that only waits on tasks submitted
        # before it cannot deadlock, whatever the pool size or the searches running
        for name in _joined_first(names):
            peers = {
                other: partial(_hits_of, futures[other])
                for other in path_spec(name).joins
                if other in futures
            }
            futures[name] = submit(self._pool, self._timed_path, name, query, limit, filters, peers)
        out = PathRuns()
        for name in names:
            try:
                result, ms = futures[name].result()
            except Exception as exc:  # noqa: BLE001 - a failing path never kills the search
                if isinstance(exc, QueryError):
                    raise
                if (
                    isinstance(exc, JudgeError)
                    and not isinstance(exc, BudgetError)
                    and self.settings.judge.on_failure == "raise"
                ):
                    raise
                out.reasons[name] = _path_failure(name, exc)
                continue
            out.runs[name] = list(result.hits)
            out.timings[f"{name}_ms"] = ms
            if result.timings:
                out.stages[name] = dict(result.timings)
            if result.usage:
                out.usage[name] = dict(result.usage)
            if result.degraded:
                out.reasons[name] = result.degraded
        return out

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
        depth = self.settings.fusion.depth
        ids = dict.fromkeys(h.chunk_id for hits in runs.values() for h in hits if h.rank <= depth)
        return self.components.store.chunk_views(ids, filters)

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
        views = self.visible_chunks(ran.runs, filters)
        measured: QueryFacts | None = None
        if facts:
            t0 = time.perf_counter()
            dense = any(PATHS[n].kind == "embedding" for n in ran.runs)
            measured = query_facts(self.components, query, dense=dense, filters=filters)
            ran.timings["trust_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        # a tenant's search shows no score that depends on the whole index (other tenants'
        # documents included): ranks and RRF terms only for those paths, fused by rank
        scoped = filters.tenant is not None
        hidden = frozenset(n for n in names if scoped and PATHS[n].corpus_scores)
        shape = next(
            (
                str(ran.usage[n]["shape"])
                for n in ran.runs
                if PATHS[n].kind == "judged" and "shape" in ran.usage.get(n, {})
            ),
            None,
        )
        return FusionInput(query, ran.runs, views, measured, hidden, shape)

    def _shown(
        self,
        ruled: list[FusedHit],
        top_k: int,
        filters: Filters,
        fuse_more: Callable[..., tuple[list[FusedHit], Trust | None]],
        window: int,
    ) -> Iterator[tuple[FusedHit, ChunkRecord, dict[str, ResourceRecord], dict[str, ChunkRecord]]]:
        """The fused hits ``ruled`` (the first ``window`` of the fusion, or all of them when
        fewer) in order, each with its chunk record and the chunk and resource records read
        with it (its copies', its merged neighbours' and its resource's held-back hits' among
        them), read ``top_k`` hits at a time as the response takes
        them. A response that takes more than the window (stale results held back) gets the
        rest from ``fuse_more(limit=None)``, the whole fusion, whose first hits are these. A
        hit whose chunk or resource went away since fusion read its view, or that no longer
        passes ``filters``, is left out."""
        store = self.components.store
        whole = len(ruled) < window
        pos = 0
        while True:
            if pos >= len(ruled):
                if whole:
                    return
                ruled, whole = fuse_more(limit=None)[0], True
                continue
            page = ruled[pos : pos + top_k]
            pos += len(page)
            records = store.chunks(
                c for f in page for c in (f.chunk_id, *f.duplicates, *f.merged, *f.capped)
            )
            resources = store.resources(r.key for r in records.values())
            for f in page:
                rec = records.get(f.chunk_id)
                res = resources.get(rec.key) if rec is not None else None
                if rec is not None and res is not None and filters.allows(res):
                    yield f, rec, resources, records

    def _timed_path(
        self, name: str, query: str, limit: int, flt: Filters, peers: Mapping[str, Any]
    ) -> tuple[PathResult, float]:
        t0 = time.perf_counter()
        retriever = self.components.retriever(name)
        result = retriever.retrieve(query, limit=limit, filters=flt, peers=peers)
        return result, round((time.perf_counter() - t0) * 1000, 3)

    @staticmethod
    def _result(
        rank: int,
        fused: FusedHit,
        recs: Sequence[ChunkRecord],
        stale: str | None,
        explain: bool,
        max_text: int,
        trust: Trust | None = None,
        hidden: frozenset[str] = frozenset(),
        also_in: tuple[Mapping[str, Any], ...] = (),
        *,
        more: tuple[Mapping[str, Any], ...] = (),
        score: float | None = None,
        one_hop: str | None = None,
    ) -> SearchResult:
        """One result (``stale``: why its source file is stale, None when fresh) of the fused
        hit ``fused``, whose chunk and the neighbours merged into it (``fused.merged``) are
        ``recs`` (its own first): their text joined in source order (:func:`_stitched`), their
        whole line and byte range. The paths in ``hidden`` show rank and RRF term but no raw or
        path score (``None``), nor a score in the explanation; ``also_in``: the copies fusion
        folded into it (:func:`_copy_of`); ``more``: its resource's further results the
        per-resource cap moved below the others' (not shown above); ``score``: its place's
        score (:func:`~hybridsag.fusion.monotone_scores`; the fused score when None);
        ``one_hop``: the shape of a question whose next-hop slots were off (said in the
        ``why`` of a result a next-hop query found)."""
        rec = recs[0]
        paths: dict[str, dict[str, Any]] = {}
        why: list[str] = []
        for c in fused.contributions:
            facts = {k: v for k, v in c.detail.items() if k != "resource_id"}
            if c.judge_p is not None:
                facts["judge_p"] = c.judge_p
            if c.next_hop:
                facts["next_hop"] = True
            shown = c.path not in hidden
            paths[c.path] = {
                "rank": c.rank,
                "raw_score": c.raw_score if shown else None,
                "score": c.score if shown else None,
                "rrf_term": c.rrf_term,
                **facts,
            }
            if explain:
                extra = ", ".join(f"{k}={v}" for k, v in facts.items() if k != "version")
                why.append(
                    f"{c.path}: rank {c.rank}"
                    + (f", raw score {c.raw_score:.4g}" if shown else "")
                    + (f", {extra}" if extra else "")
                )
        if explain and trust is not None:
            for path, reason in trust.reasons.items():
                # the trust signals read corpus-wide scores: a tenant-scoped search gets the
                # weights only
                said = "" if hidden else f", {reason}"
                why.append(f"trust {path}: weight {trust.weights.get(path, 0.0):.3g}{said}")
        text, start_line, end_line, byte_start, byte_end = _stitched(recs)
        score = fused.score if score is None else score
        if explain:
            if one_hop is not None and fused.next_hop_rank is not None:
                why.append(
                    f"next-hop slot off: the question reads as one-hop (evidence shape "
                    f"{one_hop!r}), so a next-hop find keeps its fused place"
                )
            why.extend(f"rule {r}: {RULE_REASONS.get(r, r)}" for r in fused.rules)
            if len(recs) > 1:
                why.append(
                    "merged: " + ", ".join(f"lines {r.start_line}-{r.end_line}" for r in
                                           sorted(recs, key=lambda r: r.ordinal))
                )  # fmt: skip
            if also_in:
                why.append("also in: " + ", ".join(copy_place(a) for a in also_in))
            if more:
                why.append(f"more in this file: {more_words(more)}")
            if score != fused.score:
                why.append(
                    f"score {score:.4g}: the fused score {fused.score:.4g} evened with the "
                    "results beside it, so that scores never rise down the list"
                )
            if stale is not None:
                why.append(
                    f"stale: the source file was {stale} since it was indexed "
                    f"({_STALE_WHY.get(stale, stale)}); index its folder again or run "
                    "hybridsag reconcile"
                    if stale in (STALE_CHANGED, STALE_DELETED)
                    else f"stale: the source file is {stale} ({_STALE_WHY.get(stale, stale)}); "
                    "index its folder again or run hybridsag reconcile"
                )
        return SearchResult(
            rank=rank,
            chunk_id=rec.chunk_id,
            resource_id=rec.resource_id,
            title=rec.title,
            heading_path=rec.heading_path,
            text=text[:max_text],
            start_line=start_line,
            end_line=end_line,
            byte_start=byte_start,
            byte_end=byte_end,
            content_sha256=rec.content_sha256 if len(recs) == 1 else _sha256(text),
            source_uri=rec.source_uri,
            score=score,
            paths=paths,
            rules=fused.rules,
            why=tuple(why),
            stale=stale is not None,
            stale_reason=stale,
            rrf_rank=fused.rrf_rank,
            text_truncated=len(text) > max_text,
            tenant=rec.tenant,
            also_in=also_in,
            fused_score=fused.score,
            merged=tuple(r.chunk_id for r in sorted(recs[1:], key=lambda r: r.ordinal)),
            more_in_resource=more,
        )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _stitched(recs: Sequence[ChunkRecord]) -> tuple[str, int, int, int, int]:
    """The text, first and last line and byte range of neighbouring chunks of one resource
    read as one (source order): each chunk's text from where the one before it ends (the
    sentences neighbours share are said once: chunk texts are exact slices of the source, so
    their byte ranges say how much they overlap), a blank line where the source between two of
    them held only markup or space."""
    ordered = sorted(recs, key=lambda r: r.ordinal)
    parts = [ordered[0].text]
    end = ordered[0].byte_end
    for r in ordered[1:]:
        if r.byte_start >= end:
            parts.append("\n\n" + r.text)
        elif r.byte_end > end:
            raw = r.text.encode("utf-8")[end - r.byte_start :]
            try:
                parts.append(raw.decode("utf-8"))
            except UnicodeDecodeError:  # not one source's slices (cannot be, but never garble)
                parts.append("\n\n" + r.text)
        end = max(end, r.byte_end)
    first, last = ordered[0], max(ordered, key=lambda r: r.byte_end)
    return "".join(parts), first.start_line, last.end_line, first.byte_start, last.byte_end


#: What ``SearchResult.also_in`` says of each copy: the fields of its chunk record that place it.
_COPY_FIELDS = (
    "chunk_id", "resource_id", "tenant", "title", "source_uri", "heading_path", "start_line",
    "end_line",
)  # fmt: skip


def _copy_of(rec: ChunkRecord) -> dict[str, Any]:
    """Where a copy folded into a result is (``SearchResult.also_in``)."""
    return {name: getattr(rec, name) for name in _COPY_FIELDS}


def _places(recs: Sequence[ChunkRecord]) -> tuple[dict[str, Any], ...]:
    """Where the copies folded into a result are (``SearchResult.also_in``), in their order:
    one place per run of neighbouring chunks of one resource (the copies of a merged result's
    chunks are one place of that resource, as the result is), its ``chunk_id`` the run's first
    in the source, its lines the run's, and ``merged`` the run's other chunk ids when it has
    any."""
    runs: list[list[ChunkRecord]] = []
    for rec in recs:
        run = next(
            (
                r
                for r in runs
                if r[0].key == rec.key
                and r[0].heading_path == rec.heading_path
                and (rec.ordinal == max(x.ordinal for x in r) + 1
                     or rec.ordinal == min(x.ordinal for x in r) - 1)
            ),
            None,
        )  # fmt: skip
        if run is None:
            runs.append([rec])
        else:
            run.append(rec)
    out = []
    for run in runs:
        ordered = sorted(run, key=lambda r: r.ordinal)
        place = _copy_of(ordered[0])
        if len(ordered) > 1:
            place["end_line"] = max(r.end_line for r in ordered)
            place["merged"] = [r.chunk_id for r in ordered[1:]]
        out.append(place)
    return tuple(out)


def _with_remote(usage: Mapping[str, Any], meter: QueryMeter) -> Mapping[str, Any]:
    """``usage`` with the meter's ``remote`` (when a remote model was called) and
    ``remote_budget`` (when the search had one); ``usage`` itself when there is neither."""
    remote, budget = meter.usage(), meter.budget()
    if not remote and budget is None:
        return usage
    out = dict(usage)
    if remote:
        out["remote"] = remote
    if budget is not None:
        out["remote_budget"] = budget
    return out


def _trust_summary(trust: Trust | None, *, signals: bool = True) -> dict[str, Any]:
    """What a response says of the trust step (rounded for reading); without ``signals`` (a
    tenant-scoped search: they read corpus-wide scores) the decision only."""
    if trust is None:
        return {}
    out: dict[str, Any] = {
        "weights": {p: round(w, 4) for p, w in trust.weights.items()},
        "judge_holds": trust.judge_holds,
        "dense_share": round(trust.dense_share, 4),
    }
    if signals:
        out["signals"] = {k: round(v, 4) for k, v in trust.signals.items()}
    return out


def _joined_first(names: Sequence[str]) -> list[str]:
    """``names`` ordered so that each path comes after the paths it joins (when they run)."""
    wanted = set(names)
    ordered: list[str] = []

    def visit(name: str, seen: frozenset[str]) -> None:
        if name in ordered or name in seen:
            return
        for other in path_spec(name).joins:
            if other in wanted:
                visit(other, seen | {name})
        ordered.append(name)

    for name in names:
        visit(name, frozenset())
    return ordered
