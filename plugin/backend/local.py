"""The operations in this process: :class:`LocalBackend` over a
:class:`~hybridsag.search.HybridSearch`.

One the caller hands in (and closes), or one it opens itself from settings
(:meth:`LocalBackend.from_settings`), on the first operation that needs it. One it opens itself
is refused (:class:`~hybridsag.errors.ServiceHoldsDataDir`) while a running service holds the
data dir (:mod:`hybridsag.records.service_lock`), before anything is opened: such a command goes
through the service instead. The search, the write path and Milvus load on the first operation
that needs them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsag.backend.health import checked, local_health, service_answers
from hybridsag.backend.hooks import ReconcileHooks, load_reconcile_hooks
from hybridsag.backend.protocol import checked_budget, query_errors
from hybridsag.errors import ConfigError, IngestError, InputError
from hybridsag.ingest.progress import IngestProgress, as_progress
from hybridsag.output.budget import DEFAULT_BUDGET
from hybridsag.records.service_lock import holder, refuse_if_held
from hybridsag.request import FeedbackOptions, FolderOptions, ListingOptions, SearchOptions, options_of

if TYPE_CHECKING:
    import threading as _threading

    from hybridsag.ab.online import Experiments
    from hybridsag.documents import Document
    from hybridsag.ingest.manifest import PreparedUpload
    from hybridsag.records.rows import ChunkRecord, ResourceRecord
    from hybridsag.results import SearchResponse
    from hybridsag.search import HybridSearch
    from hybridsag.settings import ExperimentSettings, Settings

__all__ = ["LocalBackend"]


def _cursor(cursor: str | None) -> int | None:
    """The row a page continues after, from the opaque ``cursor`` a previous page gave."""
    if cursor is None:
        return None
    if not cursor.isascii() or not cursor.isdigit() or len(cursor) > 18:  # < 2**63
        raise InputError(f"cursor {cursor[:40]!r} is not one a page of this listing gave")
    return int(cursor)


class LocalBackend:
    """The operations in this process, over a :class:`~hybridsag.search.HybridSearch`.

    ``LocalBackend(hybrid_search)`` uses a search the caller owns (and closes); ``reconciler``
    and ``experiments`` are the service's when it builds one, and by default the search's
    settings give them (the reconciler from :data:`RECONCILER_GROUP`, the experiments from
    ``ab``). :meth:`from_settings` opens its own search on the first operation that needs the
    index, refusing a data dir a running service holds.
    """

    def __init__(
        self,
        hybrid_search: HybridSearch | None = None,
        *,
        settings: Settings | None = None,
        reconciler: ReconcileHooks | None = None,
        experiments: Experiments | None = None,
        keep_reports: bool = False,
    ) -> None:
        if (hybrid_search is None) == (settings is None):
            raise ConfigError("give a hybrid_search, or settings to open one from")
        self._search = hybrid_search
        self._owns_search = hybrid_search is None
        chosen = hybrid_search.settings if hybrid_search is not None else settings
        assert chosen is not None
        self.settings: Settings = chosen
        self._reconciler = reconciler
        self._experiments = experiments
        self._owns_experiments = experiments is None
        self._keep_reports = keep_reports
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalBackend:
        """A backend that opens the data dir of ``settings`` itself, on the first operation
        that needs the index (closed by :meth:`close`); experiment reports are kept under the
        data dir (``hybridsag ab report`` writes them)."""
        return cls(settings=settings, keep_reports=True)

    # -- the parts -------------------------------------------------------------------------------

    def hybrid_search(self, *, require_index: bool = False) -> HybridSearch:
        """The search, opened now if this backend opens its own: refused while a running
        service holds the data dir (ServiceHoldsDataDir), and with ``require_index`` refused
        when the data dir holds no index (InputError: a mistyped ``--data-dir`` must not look
        like an empty index), before anything is opened."""
        search = self._search
        if search is not None:
            return search
        with self._lock:
            if self._search is None:
                s = self.settings
                refuse_if_held(s.data_dir)
                if require_index and s.store.url is None and not s.sqlite_path.is_file():
                    raise InputError(
                        f"no index at {s.data_dir.resolve()} (it holds no {s.sqlite_path.name}): "
                        "check --data-dir / HYBRIDSAG_DATA_DIR, or build one with "
                        "`hybridsag index PATH`"
                    )
                from hybridsag.search import HybridSearch

                self._search = HybridSearch(s)
            return self._search

    def _hooks(self) -> ReconcileHooks:
        with self._lock:
            if self._reconciler is None:
                self._reconciler = load_reconcile_hooks()
            return self._reconciler

    def _exps(self) -> Experiments:
        with self._lock:
            if self._experiments is None:
                from hybridsag.ab.online import Experiments

                self._experiments = Experiments(self.settings)
            return self._experiments

    def close(self) -> None:
        """Close what this backend opened itself (a search or experiments handed in stay)."""
        search: HybridSearch | None = None
        exps: Experiments | None = None
        with self._lock:
            if self._owns_search:
                search, self._search = self._search, None
            if self._owns_experiments:
                exps, self._experiments = self._experiments, None
        if search is not None:
            search.close()
        if exps is not None:
            exps.close()

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- search ----------------------------------------------------------------------------------

    def check_paths(self, paths: Sequence[str] | None) -> None:
        """QueryValueError naming an unknown path (or none left with the dense side off)."""
        if paths is not None:
            hs = self.hybrid_search()
            with query_errors():
                hs.resolve_paths(paths)

    def warm(self, paths: Sequence[str] | None = None, *, query: str = "") -> dict[str, float]:
        """``HybridSearch.warm``: builds what a search over ``paths`` needs; the milliseconds
        of each step. QueryValueError for an unknown path."""
        hs = self.hybrid_search(require_index=True)
        with query_errors():
            return hs.warm(paths, query=query)

    def query_terms(self, query: str) -> list[str]:
        """The lexical index's terms of ``query`` (what a snippet highlights)."""
        return self.hybrid_search(require_index=True).components.lexical.query_terms(query)

    def search(self, query: str, options: SearchOptions) -> SearchResponse:
        """``HybridSearch.search`` with the options whole: the typed response, as the search
        made it (QueryValueError for bad input)."""
        hs = self.hybrid_search(require_index=True)
        with query_errors():
            return hs.search(query, options)

    async def asearch(self, query: str, options: SearchOptions) -> SearchResponse:
        """:meth:`search` in a worker thread: the in-process search is synchronous."""
        import asyncio

        return await asyncio.to_thread(self.search, query, options)

    def search_agent(self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET) -> str:
        chars = checked_budget(budget)
        return self.search(query, replace(options, explain=False)).as_agent_text(chars)

    async def asearch_agent(
        self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET
    ) -> str:
        import asyncio

        return await asyncio.to_thread(self.search_agent, query, options, budget)

    # -- writes ----------------------------------------------------------------------------------

    def documents(self, resources: Sequence[Mapping[str, Any]]) -> list[Document]:
        """``resources`` (``id``, ``text``, optional ``title``, ``metadata``, ``tenant``, ``acl``,
        ``format``) as documents, every one checked: the first bad one is an
        :class:`~hybridsag.errors.IngestError` naming ``resources[i]``, its ``loc`` ``["body",
        i]`` (where the service's request holds the list)."""
        from hybridsag.documents import make_document

        docs = []
        for i, r in enumerate(resources):
            try:
                docs.append(
                    make_document(
                        r["id"], r["text"], title=r.get("title", ""),
                        metadata=r.get("metadata"), tenant=r.get("tenant") or "",
                        acl=r.get("acl") or (), fmt=r.get("format", "markdown"),
                    )
                )  # fmt: skip
            except InputError as exc:
                raise IngestError(f"resources[{i}]: {exc}", loc=["body", i]) from exc
        return docs

    def ingest_documents(
        self,
        docs: Sequence[Document],
        *,
        mode: str | None = None,
        cancel: _threading.Event | None = None,
    ) -> dict[str, Any]:
        """Ingest checked documents (:meth:`documents`); once ``cancel`` is set the write stops
        at its next cancellation point, undone (WriteCancelledError). The ingest report."""
        hs = self.hybrid_search()
        return hs.ingest_documents(docs, mode=mode, cancel=cancel).as_dict()  # type: ignore[arg-type]

    def ingest(
        self, resources: Sequence[Mapping[str, Any]], *, mode: str | None = None
    ) -> dict[str, Any]:
        """Ingest ``resources``: all checked first, so one bad entry refuses the batch (an
        IngestError naming ``resources[i]``) before anything is written, as the service
        does. Returns the ingest report."""
        return self.ingest_documents(self.documents(resources), mode=mode)

    def ingest_jsonl(
        self, path: Path, *, mode: str | None = None, progress: IngestProgress | None = None
    ) -> dict[str, Any]:
        hs = self.hybrid_search()
        report = hs.ingest_jsonl(Path(path), mode=mode, progress=progress)  # type: ignore[arg-type]
        return report.as_dict()

    def sync_folder(
        self,
        path: Path,
        options: FolderOptions | None = None,
        *,
        progress: IngestProgress | None = None,
        **keywords: Any,
    ) -> dict[str, Any]:
        """``HybridSearch.ingest_folder``: the folder (or one file) indexed in process."""
        o = options_of(FolderOptions, options, keywords)
        hs = self.hybrid_search()
        report = hs.ingest_folder(
            Path(path), tenant=o.tenant, acl=o.acl, progress=progress, prune=o.prune
        )
        return report.as_dict()

    def sync_need(self, root: str, files: Sequence[Any], **options: Any) -> dict[str, Any]:
        """Step 1 of a folder sync through the service (:func:`hybridsag.ingest.manifest.sync_need`:
        the files of the manifest whose bytes are needed); ``options`` as it takes them."""
        return self.hybrid_search().sync_need(root, files, **options).as_dict()

    def prepare_upload(self, root: str, path: str, data: bytes, **options: Any) -> PreparedUpload:
        """Step 2, first half: one needed file's bytes made into its document, converted in its
        bounded process, without the writer (:func:`hybridsag.ingest.manifest.prepare_upload`)."""
        return self.hybrid_search().prepare_upload(root, path, data, **options)

    def apply_upload(self, prepared: PreparedUpload, **options: Any) -> dict[str, Any]:
        """Step 2, second half, on the writer: the prepared file checked again and indexed
        (:func:`hybridsag.ingest.manifest.apply_upload`); the ingest report."""
        return self.hybrid_search().apply_upload(prepared, **options).as_dict()

    def sync_commit(self, root: str, paths: Sequence[str], **options: Any) -> dict[str, Any]:
        """Step 3: the folder's resources the client's folder no longer holds pruned
        (:func:`hybridsag.ingest.manifest.sync_commit`); the ingest report."""
        return self.hybrid_search().sync_commit(root, paths, **options).as_dict()

    def delete(self, resource_id: str, *, tenant: str | None = None) -> bool:
        """Delete the resource on every path; False when there is none."""
        return self.hybrid_search(require_index=True).delete(resource_id, tenant=tenant or "")

    def set_enabled(self, resource_id: str, enabled: bool, *, tenant: str | None = None) -> bool:
        """Enable (searchable again) or disable (hidden, kept) the resource; False when there
        is none."""
        hs = self.hybrid_search(require_index=True)
        call = hs.enable if enabled else hs.disable
        return call(resource_id, tenant=tenant or "")

    def exclusions(
        self, *, tenant: str | None = None, resource_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The folder files deleted while they stay on disk (of exact ``tenant`` and id
        ``resource_id`` when given), ``Exclusion.as_dict()`` each."""
        hs = self.hybrid_search(require_index=True)
        return [x.as_dict() for x in hs.exclusions(tenant=tenant, resource_id=resource_id)]

    def include(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """Lift the exclusion of the folder file and index it again; the ingest report
        (NotFoundError when that id is not excluded)."""
        hs = self.hybrid_search(require_index=True)
        return hs.include(resource_id, tenant=tenant or "").as_dict()

    # -- reads -----------------------------------------------------------------------------------

    def record(self, resource_id: str, *, tenant: str = "") -> ResourceRecord | None:
        """The stored record of the resource (any status), or None (the service's scope
        checks)."""
        return self.hybrid_search(require_index=True).resource(resource_id, tenant=tenant)

    def chunks(self, resource_id: str, *, tenant: str = "") -> list[ChunkRecord]:
        """The chunks of the resource's current version, with their text, in order."""
        return self.hybrid_search(require_index=True).resource_chunks(resource_id, tenant=tenant)

    def list_page(
        self,
        options: ListingOptions,
        *,
        statuses: Sequence[str] | None = None,
        acl: Sequence[str] | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """One page of the resources ``options`` lists, oldest first: ``{"resources":
        [ResourceSummary.as_dict()], "next_cursor": str | None}``; ``statuses`` (already
        checked: the service gives the ones a role sees) replace the options' status, ``acl``
        filters as a search does (public resources and those sharing a tag); ``cursor``
        continues where the page that gave it ended. InputError for a cursor no page gave."""
        after = _cursor(cursor)
        from hybridsag.search import ResourceSummary

        store = self.hybrid_search(require_index=True).components.store
        rows, last = store.resource_page(
            tenant=options.tenant, statuses=statuses or options.statuses,
            prefix=options.prefix, acl=acl, after=after, limit=options.limit,
        )  # fmt: skip
        return {
            "resources": [ResourceSummary(record, n).as_dict() for record, n in rows],
            "next_cursor": None if last is None else str(last),
        }

    def list_resources(
        self, options: ListingOptions | None = None, **keywords: Any
    ) -> list[dict[str, Any]]:
        """The resources ``options`` lists (or its fields as keywords), oldest first."""
        page = self.list_page(options_of(ListingOptions, options, keywords))
        return page["resources"]  # type: ignore[no-any-return]

    def show(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any] | None:
        """The resource's record, a summary of its current chunks and whether its source
        file is stale (``ResourceDetail.as_dict()``); None when there is none."""
        detail = self.hybrid_search(require_index=True).get_resource(
            resource_id, tenant=tenant or ""
        )
        return None if detail is None else detail.as_dict()

    # -- consistency and health ------------------------------------------------------------------

    def rebuild_vectors(self, *, progress: IngestProgress | None = None) -> dict[str, Any]:
        """Give this data dir its own collection (index id) and re-embed every chunk into it
        (``progress`` sees the chunks embedded); ``{"index_id", "collection", "vectors"}``."""
        parts = self.hybrid_search(require_index=True).components
        ticks = as_progress(progress)
        ticks.embedding(parts.store.counts()["chunks"])
        written = parts.rebuild_vectors(progress=ticks.embedded)
        return {"index_id": parts.index_id, "collection": parts.collection, "vectors": written}

    def reconcile(self, *, dry_run: bool, force: bool = False) -> dict[str, Any]:
        """Plan (and unless ``dry_run`` apply): the audit report (ConsistencyError when
        refused)."""
        hooks = self._hooks()
        return hooks.run(self.hybrid_search(), dry_run=dry_run, force=force)

    def audit(self) -> dict[str, Any]:
        """The newest audit report under the data dir's reports dir (with ``path`` and the
        ``skipped`` files that are not reports); NotFoundError naming what was skipped when
        there is none. Reads that folder only."""
        return self._hooks().latest(self.settings)

    def health(self) -> dict[str, str]:
        """The checks ``hybridsag doctor`` shows: the store, the judge, the embedding model
        (its files and what the index recorded; nothing is embedded), Milvus (opened from the
        recorded dimension), the lexical index and the fusion. On a data dir a running
        service holds, only ``service``: that it answers, and how to check its parts
        (``hybridsag --server URL doctor``), since opening them here would fail or contend."""
        held = holder(self.settings.data_dir)
        if held is not None and self._search is None:
            checks: dict[str, str] = {}
            checked(
                "service",
                lambda: f"the data dir is held by the running service at {held.url} "
                f"(pid {held.pid}, since {held.started_at}), which "
                f"{service_answers(held.url)}; its store, models and Milvus are checked by: "
                f"hybridsag --server {held.url} doctor",
                checks,
            )
            return checks
        return local_health(self.settings, lambda: self.hybrid_search().components)

    def writes_granted(self) -> None:
        """None: in process no token grants or refuses writes (see :class:`Backend`)."""
        return None

    # -- experiments -----------------------------------------------------------------------------

    def experiments(self) -> list[dict[str, Any]]:
        return [s.as_dict() for s in self._exps().list()]

    def experiment(self, name: str) -> dict[str, Any]:
        return self._exps().get(name).as_dict()

    def define_experiment(self, definition: Mapping[str, Any] | ExperimentSettings) -> dict[str, Any]:
        """Define an experiment (InputError when the name is taken or an arm is bad)."""
        from pydantic import ValidationError

        from hybridsag.settings import ExperimentSettings

        if not isinstance(definition, ExperimentSettings):
            try:
                definition = ExperimentSettings.model_validate(dict(definition))
            except ValidationError as exc:
                raise InputError(f"experiment definition: {exc}") from None
        return self._exps().define(definition).as_dict()

    def set_experiment_active(self, name: str, active: bool) -> dict[str, Any]:
        return self._exps().set_active(name, active).as_dict()

    def applicable_experiment(self, experiment: str | None, unit: str | None) -> str | None:
        """The name of the experiment a search of caller ``unit`` joins (the one named, which
        must run; else the first running one when a caller is named), or None for a plain
        search. InputError for an unknown or stopped experiment, or one without a caller."""
        joined = self._exps().applicable(experiment, unit)
        return None if joined is None else joined.definition.name

    def experiment_search(
        self,
        query: str,
        options: SearchOptions,
        *,
        unit: str,
        experiment: str,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """Search for caller ``unit`` under ``experiment`` (its arm sets paths, weights and
        judge order; ``options`` gives the rest) and log the impression: the response with
        ``query_id``, ``experiment``, ``arm`` (and ``teams`` when interleaving)."""
        hs = self.hybrid_search(require_index=True)
        return self._exps().search(
            hs, query, options, unit=unit, experiment=experiment, tenant=tenant
        )

    def experiment_report(self, name: str, *, tenant: str | None = None) -> dict[str, Any]:
        """The report of ``tenant``'s traffic (None: every tenant's); writes nothing."""
        return self._exps().report(name, tenant=tenant)

    def experiment_chart(self, name: str, *, tenant: str | None = None) -> bytes:
        """The PNG chart of :meth:`experiment_report` (NotFoundError without matplotlib)."""
        return self._exps().chart(name, tenant=tenant)

    def keep_experiment_report(self, name: str) -> Path | None:
        """Write report.json and report.png of every tenant's traffic under
        ``<data_dir>/ab/NAME`` and return that folder, when this backend keeps reports
        (:meth:`from_settings`: the CLI); None otherwise (the service writes no file)."""
        if not self._keep_reports:
            return None
        self._exps().write_report(name)
        return self.settings.ab_dir / name

    def feedback(
        self, query_id: str, options: FeedbackOptions | None = None, *, tenant: str | None = None,
        **keywords: Any,
    ) -> dict[str, Any]:
        """Feedback on a result of a search answered under an experiment; with ``tenant``
        only on that tenant's searches (a tenant token's), with None on any (an admin's)."""
        o = options_of(FeedbackOptions, options, keywords)
        return self._exps().feedback(query_id, o, tenant=tenant)
