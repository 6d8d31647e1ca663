"""One way in for every face: the :class:`Backend` protocol, in process or over a service.

The CLI, the MCP server, the LangChain and LlamaIndex adapters and the HTTP service's own
handlers reach the index through a :class:`Backend`. A face parses its input, calls one
operation, renders the answer; it never branches on where the index is.

- :class:`LocalBackend` runs the operations in this process over a
  :class:`~hybridsag.search.HybridSearch`: one the caller hands in (and closes), or one it opens
  itself from settings (:meth:`LocalBackend.from_settings`), on the first operation that needs
  it. One it opens itself is refused (:class:`~hybridsag.errors.ServiceHoldsDataDir`) while a
  running service holds the data dir (:mod:`hybridsag.records.service_lock`), before anything is
  opened: such a command goes through the service instead.
- :class:`RemoteBackend` sends them to a running ``hybridsag serve``
  (:class:`~hybridsag.client.ServiceClient`; the async searches through
  :class:`~hybridsag.client.AsyncServiceClient` on the caller's event loop). Each call opens
  its own client, so a backend holds no socket between calls and may be used from any thread.
- :func:`open_backend` picks one from the settings: remote when ``server.url`` (``--server``)
  is set, local otherwise.

Both sides take and return the same JSON-shaped values (``SearchResponse.as_dict()``, the
ingest report, ``ResourceSummary.as_dict()``, ``ResourceDetail.as_dict()``, the audit report,
experiment states and reports), so a face renders one shape. A resource is ``(tenant, id)``: an
operation on one takes its ``tenant``, where None means the caller's own (in process the
un-tenanted resources, ``""``; through a service the token's tenant, or ``""`` for an admin).

Reconcile and audit come from a :class:`ReconcileHooks`: this package never imports
``hybridsag.consistency``; that package publishes its implementation under the entry-point group
:data:`RECONCILER_GROUP` (pyproject.toml), which :meth:`LocalBackend.from_settings` loads on the
first reconcile, and the ``serve`` command hands the same implementation to the service.

Errors: bad search input raises :class:`QueryValueError` (a
:class:`~hybridsag.errors.QueryError` that is also the ``ValueError`` the frameworks expect);
everything else keeps its ``HybridSagError`` type (``ServiceError`` when the service cannot be
reached, ``AuthError``/``ForbiddenError`` for a refused token, ``NotFoundError`` for an unknown
experiment). This module imports neither the search, the write path, Milvus nor httpx: each
loads on the first operation that needs it, so a face's start-up pays for what it uses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hybridsag.output.agent import agent_text
from hybridsag.output.budget import DEFAULT_BUDGET, check_budget
from hybridsag.errors import (
    ConfigError,
    ForbiddenError,
    IngestError,
    InputError,
    NotFoundError,
    QueryError,
    ServiceError,
)
from hybridsag.ingest.progress import IngestProgress, as_progress
from hybridsag.paths.query import validate_query
from hybridsag.records.service_lock import holder, refuse_if_held
from hybridsag.records.filters import Filters
from hybridsag.records.schema import STATUSES

if TYPE_CHECKING:
    import threading as _threading

    from hybridsag.ab.online import Experiments
    from hybridsag.client import ServiceClient
    from hybridsag.search import HybridSearch
    from hybridsag.settings import ExperimentSettings, Settings
    from hybridsag.records.rows import ChunkRecord, ResourceRecord
    from hybridsag.documents import Document
    from hybridsag.ingest.manifest import PreparedUpload

__all__ = [
    "MAX_QUERY_CHARS",
    "PAGE_MAX",
    "RECONCILER_GROUP",
    "Backend",
    "LocalBackend",
    "QueryValueError",
    "ReconcileHooks",
    "RemoteBackend",
    "SearchOptions",
    "load_reconcile_hooks",
    "make_backend",
    "open_backend",
]

#: The longest query the service's schema admits (its ``query.max_chars`` may be lower).
MAX_QUERY_CHARS = 1_000_000
#: The most resources one page of ``GET /v1/resources`` holds (and its default size).
PAGE_MAX = 1000
#: Entry-point group of the reconciler (:class:`ReconcileHooks`): ``hybridsag.consistency``
#: publishes its ``ServiceReconciler`` there, so that this package need not import it.
RECONCILER_GROUP = "hybridsag.reconciler"


class QueryValueError(QueryError, ValueError):
    """Bad search input: hybridsag's :class:`QueryError` that is also the ``ValueError`` the
    frameworks expect. ``__cause__`` is the original error."""


def _value_error(exc: InputError) -> QueryValueError:
    """``exc`` as a QueryValueError (raise it ``from exc``)."""
    return QueryValueError(str(exc))


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """What a search passes besides the query; checked when built.

    ``top_k``: results (1..1000; None: ``search.top_k`` of the searching side); ``paths``: recall
    path names (None: ``search.paths`` of the searching side); ``filters``: as
    ``HybridSearch.search`` takes them (tenant, acl, metadata, resource_ids, statuses);
    ``include_stale``, ``judge_order``: None for the searching side's settings; ``weights``:
    fusion weights per path (None: ``fusion.weights``); ``explain``: each path's facts in the
    results; ``min_confidence``: 0..1, a response whose confidence is below it returns no
    results (None: none withheld).

    Raises:
        QueryValueError: a ``top_k`` out of range, ``paths`` given as one string, a bad
            filter or a ``min_confidence`` outside 0..1, naming it.
    """

    top_k: int | None = 5
    paths: tuple[str, ...] | None = None
    filters: Mapping[str, Any] = field(default_factory=dict)
    include_stale: bool | None = None
    judge_order: bool | None = None
    weights: Mapping[str, float] | None = None
    explain: bool = True
    min_confidence: float | None = None

    def __post_init__(self) -> None:
        top_k = self.top_k
        if top_k is not None and (
            not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 1000
        ):
            raise QueryValueError(f"top_k must be an integer in 1..1000, got {top_k!r}")
        if isinstance(self.paths, str):
            raise QueryValueError(f"paths must be a list of path names, got {self.paths!r}")
        floor = self.min_confidence
        if floor is not None and (
            isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor <= 1
        ):
            raise QueryValueError(f"min_confidence must be a number in 0..1, got {floor!r}")
        try:
            Filters.from_mapping(self.filters)
        except InputError as exc:
            raise _value_error(exc) from exc


class ReconcileHooks(Protocol):
    """What a backend and the service need of the reconciler (``hybridsag.consistency``
    provides one under :data:`RECONCILER_GROUP`).

    ``run`` plans (and with ``dry_run=False`` applies) over ``search`` and returns the audit
    report, raising ``ConsistencyError`` when refused (lease held, mass-delete guard); ``latest``
    is the newest audit report under the settings' reports dir (with ``path`` and ``skipped``),
    ``NotFoundError`` naming what it skipped when there is none; ``start_schedule`` starts the ``consistency.cron`` job over ``search`` (the same
    lease as every other reconcile), ``next_run`` says when it runs next (ISO time) and
    ``stop_schedule`` stops it.
    """

    def run(self, search: HybridSearch, *, dry_run: bool, force: bool) -> dict[str, Any]: ...

    def latest(self, settings: Settings) -> dict[str, Any]: ...

    def start_schedule(self, search: HybridSearch) -> None: ...

    def next_run(self) -> str | None: ...

    def stop_schedule(self) -> None: ...


def load_reconcile_hooks() -> ReconcileHooks:
    """The reconciler published under :data:`RECONCILER_GROUP` (the first by name), built
    with no arguments.

    Raises:
        ConfigError: none is installed (``hybridsag.consistency`` is part of the package, so
            this means a broken install), or it fails to load.
    """
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=RECONCILER_GROUP), key=lambda e: e.name)
    if not found:
        raise ConfigError(
            f"no reconciler is installed (entry-point group {RECONCILER_GROUP!r} is empty): "
            "reinstall hybridsag (pip install -e .)"
        )
    try:
        return found[0].load()()  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - a broken plugin is named, never a traceback
        raise ConfigError(
            f"the reconciler {found[0].value} failed to load: {type(exc).__name__}: {exc}"
        ) from exc


class Backend(Protocol):
    """The operations every face uses, in process (:class:`LocalBackend`) or over a running
    service (:class:`RemoteBackend`); both take and return the same JSON-shaped values.

    Searching: ``search`` returns ``SearchResponse.as_dict()``, ``search_agent`` its agent
    text (:func:`hybridsag.output.agent.agent_text`); bad input is a :class:`QueryValueError`.
    ``warm`` builds what a search over ``paths`` needs and returns the milliseconds of each
    step (nothing to build through a service); ``query_terms`` are the terms a result's
    snippet highlights (none through a service, which does not say them); ``check_paths``
    refuses, where it can tell before a search, a path the searching side cannot run.

    Writing: ``ingest`` takes resources as ``POST /v1/resources`` does (``id``, ``text``,
    optional ``title``, ``metadata``, ``tenant``, ``acl``, ``format``; one bad entry refuses
    the batch), ``ingest_jsonl`` a JSONL file (bad lines reported by ``file:line``),
    ``sync_folder`` a folder (the resources of the folder whose files are gone are removed
    with ``prune``); each returns the ingest report. ``delete`` and ``set_enabled`` answer
    False when there is no such resource (or none the caller may see). A folder file deleted
    while it stays on disk is kept out of its folder's index: ``exclusions`` lists those
    (``Exclusion.as_dict()``), ``include`` lifts one and indexes the file again (the ingest
    report; ``NotFoundError`` when that id is not excluded).

    ``writes_granted`` says who decides whether this caller may write: through a service its
    token's role (True for ``write`` and ``admin``, False for ``read``: the service would refuse
    every write); in process nothing grants or refuses them (None: the face's own setting, such
    as ``mcp.allow_writes``, decides).

    Reading: ``list_resources`` as ``hybridsag list`` lists them (``ResourceSummary.as_dict()``,
    oldest first; a tenant-scoped token sees only its own), ``show`` one resource
    (``ResourceDetail.as_dict()``) or None.

    Consistency and health: ``rebuild_vectors`` gives the data dir its own collection and
    re-embeds every chunk into it (in process only), ``reconcile`` returns the audit report
    (``ConsistencyError`` when refused), ``audit`` the newest one (``NotFoundError`` when there
    is none yet); ``health`` the checks
    a ``doctor`` shows, name -> ``"ok: ..."`` or ``"failed: ..."``.

    Experiments (hybridsag.ab): their states, one's state, define, start/stop, report (of one
    tenant's traffic, or every tenant's), where the report is kept (in process under the data
    dir; a service keeps none: None), and feedback on a result shown under one.
    """

    def search(self, query: str, options: SearchOptions) -> dict[str, Any]: ...

    async def asearch(self, query: str, options: SearchOptions) -> dict[str, Any]: ...

    def search_agent(
        self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET
    ) -> str: ...

    async def asearch_agent(
        self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET
    ) -> str: ...

    def warm(self, paths: Sequence[str] | None = None, *, query: str = "") -> dict[str, float]: ...

    def query_terms(self, query: str) -> list[str]: ...

    def check_paths(self, paths: Sequence[str] | None) -> None: ...

    def ingest(
        self, resources: Sequence[Mapping[str, Any]], *, mode: str | None = None
    ) -> dict[str, Any]: ...

    def ingest_jsonl(
        self, path: Path, *, mode: str | None = None, progress: IngestProgress | None = None
    ) -> dict[str, Any]: ...

    def sync_folder(
        self,
        path: Path,
        *,
        tenant: str = "",
        acl: Sequence[str] = (),
        prune: bool = True,
        progress: IngestProgress | None = None,
    ) -> dict[str, Any]: ...

    def delete(self, resource_id: str, *, tenant: str | None = None) -> bool: ...

    def set_enabled(self, resource_id: str, enabled: bool, *, tenant: str | None = None) -> bool: ...

    def exclusions(
        self, *, tenant: str | None = None, resource_id: str | None = None
    ) -> list[dict[str, Any]]: ...

    def include(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any]: ...

    def list_resources(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        prefix: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]: ...

    def show(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any] | None: ...

    def rebuild_vectors(self, *, progress: IngestProgress | None = None) -> dict[str, Any]: ...

    def reconcile(self, *, dry_run: bool, force: bool = False) -> dict[str, Any]: ...

    def audit(self) -> dict[str, Any]: ...

    def health(self) -> dict[str, str]: ...

    def writes_granted(self) -> bool | None: ...

    def experiments(self) -> list[dict[str, Any]]: ...

    def experiment(self, name: str) -> dict[str, Any]: ...

    def define_experiment(self, definition: Mapping[str, Any]) -> dict[str, Any]: ...

    def set_experiment_active(self, name: str, active: bool) -> dict[str, Any]: ...

    def experiment_report(self, name: str, *, tenant: str | None = None) -> dict[str, Any]: ...

    def keep_experiment_report(self, name: str) -> Path | None: ...

    def feedback(
        self,
        query_id: str,
        *,
        position: int | None = None,
        chunk_id: str | None = None,
        kind: str = "click",
        tenant: str | None = None,
    ) -> dict[str, Any]: ...

    def close(self) -> None: ...


def _budget(budget: int) -> int:
    try:
        return check_budget(budget)
    except ValueError as exc:
        raise QueryValueError(str(exc)) from exc


def _check_listing(status: str | None, limit: int | None) -> None:
    if status is not None and status not in STATUSES:
        raise InputError(f"unknown status {status!r}; valid: {', '.join(STATUSES)}")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InputError(f"limit must be a positive integer, got {limit!r}")


def _cursor(cursor: str | None) -> int | None:
    """The row a page continues after, from the opaque ``cursor`` a previous page gave."""
    if cursor is None:
        return None
    if not cursor.isascii() or not cursor.isdigit() or len(cursor) > 18:  # < 2**63
        raise InputError(f"cursor {cursor[:40]!r} is not one a page of this listing gave")
    return int(cursor)


def _checked(name: str, fn: Callable[[], str], out: dict[str, str]) -> bool:
    """Run one health check into ``out``: ``"ok: <detail>"``, or ``"failed: <Type>: <why>"``."""
    try:
        out[name] = f"ok: {fn()}"
        return True
    except Exception as exc:  # noqa: BLE001 - a health check reports every failure
        out[name] = f"failed: {type(exc).__name__}: {exc}"
        return False


def _service_answers(url: str) -> str:
    """That the service at ``url`` answers ``/healthz`` (ServiceError otherwise)."""
    import httpx

    try:
        response = httpx.get(f"{url}/healthz", timeout=5.0)
    except httpx.HTTPError as exc:
        raise ServiceError(f"no answer from {url}/healthz: {exc}") from None
    if response.status_code != 200:
        raise ServiceError(f"{url}/healthz answered HTTP {response.status_code}")
    return "answers /healthz"


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
            try:
                hs.resolve_paths(paths)
            except InputError as exc:
                raise _value_error(exc) from exc

    def warm(self, paths: Sequence[str] | None = None, *, query: str = "") -> dict[str, float]:
        """``HybridSearch.warm``: builds what a search over ``paths`` needs; the milliseconds
        of each step. QueryValueError for an unknown path."""
        hs = self.hybrid_search(require_index=True)
        try:
            return hs.warm(paths, query=query)
        except InputError as exc:
            raise _value_error(exc) from exc

    def query_terms(self, query: str) -> list[str]:
        """The lexical index's terms of ``query`` (what a snippet highlights)."""
        return self.hybrid_search(require_index=True).components.lexical.query_terms(query)

    def search(self, query: str, options: SearchOptions) -> dict[str, Any]:
        hs = self.hybrid_search(require_index=True)
        try:
            response = hs.search(
                query,
                top_k=options.top_k,
                paths=options.paths,
                filters=options.filters,
                explain=options.explain,
                include_stale=options.include_stale,
                weights=options.weights,
                judge_order=options.judge_order,
                min_confidence=options.min_confidence,
            )
        except InputError as exc:
            raise _value_error(exc) from exc
        return response.as_dict()

    async def asearch(self, query: str, options: SearchOptions) -> dict[str, Any]:
        """:meth:`search` in a worker thread: the in-process search is synchronous."""
        import asyncio

        return await asyncio.to_thread(self.search, query, options)

    def search_agent(self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET) -> str:
        chars = _budget(budget)
        return agent_text(self.search(query, replace(options, explain=False)), chars)

    async def asearch_agent(
        self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET
    ) -> str:
        import asyncio

        return await asyncio.to_thread(self.search_agent, query, options, budget)

    # -- writes ----------------------------------------------------------------------------------

    def documents(self, resources: Sequence[Mapping[str, Any]]) -> list[Document]:
        """``resources`` (``id``, ``text``, optional ``title``, ``metadata``, ``tenant``, ``acl``,
        ``format``) as documents, every one checked: the first bad one is an
        :class:`~hybridsag.errors.IngestError` naming ``resources[i]``, with ``index`` = i."""
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
                error = IngestError(f"resources[{i}]: {exc}")
                error.index = i  # type: ignore[attr-defined]
                raise error from exc
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
        *,
        tenant: str = "",
        acl: Sequence[str] = (),
        prune: bool = True,
        progress: IngestProgress | None = None,
    ) -> dict[str, Any]:
        """``HybridSearch.ingest_folder``: the folder (or one file) indexed in process."""
        hs = self.hybrid_search()
        report = hs.ingest_folder(Path(path), tenant=tenant, acl=acl, progress=progress, prune=prune)
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
        *,
        tenant: str | None = None,
        statuses: Sequence[str] | None = None,
        prefix: str | None = None,
        acl: Sequence[str] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """One page of resources, oldest first: ``{"resources": [ResourceSummary.as_dict()],
        "next_cursor": str | None}``, filtered by exact ``tenant``, ``statuses``, an id
        ``prefix`` and ``acl`` (as a search is: public resources and those sharing a tag); at
        most ``limit`` (None: all); ``cursor`` continues where the page that gave it ended.
        InputError for an unknown status, a bad limit or a cursor no page gave."""
        for status in statuses or ():
            _check_listing(status, None)
        _check_listing(None, limit)
        after = _cursor(cursor)
        from hybridsag.search import ResourceSummary

        store = self.hybrid_search(require_index=True).components.store
        rows, last = store.resource_page(
            tenant=tenant, statuses=statuses, prefix=prefix, acl=acl, after=after, limit=limit
        )
        return {
            "resources": [ResourceSummary(record, n).as_dict() for record, n in rows],
            "next_cursor": None if last is None else str(last),
        }

    def list_resources(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        prefix: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Resources, oldest first, filtered by exact ``tenant``, ``status`` and an id
        ``prefix``; at most ``limit``. InputError names a bad status or limit."""
        _check_listing(status, limit)
        page = self.list_page(
            tenant=tenant, statuses=(status,) if status else None, prefix=prefix, limit=limit
        )
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
            _checked(
                "service",
                lambda: f"the data dir is held by the running service at {held.url} "
                f"(pid {held.pid}, since {held.started_at}), which "
                f"{_service_answers(held.url)}; its store, models and Milvus are checked by: "
                f"hybridsag --server {held.url} doctor",
                checks,
            )
            return checks
        return _local_health(self)

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
            hs, query, unit=unit, experiment=experiment, tenant=tenant, top_k=options.top_k,
            filters=options.filters, explain=options.explain, include_stale=options.include_stale,
        )  # fmt: skip

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
        self,
        query_id: str,
        *,
        position: int | None = None,
        chunk_id: str | None = None,
        kind: str = "click",
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """Feedback on a result of a search answered under an experiment; with ``tenant``
        only on that tenant's searches (a tenant token's), with None on any (an admin's)."""
        return self._exps().feedback(
            query_id, position=position, chunk_id=chunk_id, kind=kind, tenant=tenant,
            scoped=tenant is not None,
        )  # fmt: skip


def _local_health(backend: LocalBackend) -> dict[str, str]:
    """:meth:`LocalBackend.health` of a data dir no service holds."""
    s = backend.settings
    checks: dict[str, str] = {}
    parts: Any = None

    def store() -> str:
        nonlocal parts
        parts = backend.hybrid_search().components
        c = parts.store.counts()
        return (
            f"{s.store_display}: {c['resources']} resources, {c['chunks']} chunks, "
            f"tokenizer {parts.tokenizer.fingerprint()}"
        )

    def judge() -> str:
        built = parts.judge()
        return f"{s.judge.name} ({type(built).__name__}); on failure: {s.judge.on_failure}"

    def model() -> str:
        from hybridsag.vectors.embedder_common import resolve_model

        if s.embedding.model == "none":
            return "dense path off (embedding.model = 'none')"
        source = resolve_model(s.embedding.model)
        stored = parts.store.get_meta("embedding_model"), parts.store.get_meta("embedding_dimension")
        recorded = (
            f"index built with {stored[0]!r}, {stored[1]}-d" if stored[0] else "no vectors recorded yet"
        )
        kind = parts.embedding_backend()
        if s.embedding.backend != kind:
            kind = f"{kind}, as embedding.backend = {s.embedding.backend!r} chose"
        return f"{s.embedding.model} ({kind}): files at {source}; {recorded}"

    def milvus() -> str:
        if s.embedding.model == "none":
            return "dense path off"
        where = s.milvus.uri or f"Milvus Lite at {s.milvus_lite_path}"
        index = parts.stored_dense_index()
        if index is None:
            return f"{where}: no vectors recorded for this data dir yet"
        return f"{where}: {index.describe()}"

    def lexical() -> str:
        return parts.lexical.describe()  # Milvus: connects, checks a server's version (2.5+)

    def fusion() -> str:
        f = s.fusion
        weights = getattr(getattr(parts.judge(), "weights", None), "source", None)
        text = f"{f.method} fusion, trust step {'on' if f.trust else 'off'}"
        if f.trust:
            text += f" (model: {parts.trust_model().source})"
        return text + f"; judge {s.judge.name}" + (f" with weights: {weights}" if weights else "")

    if _checked("store", store, checks):
        for name, fn in (
            ("judge", judge),
            ("embedding model", model),
            ("milvus", milvus),
            ("lexical index", lexical),
            ("fusion", fusion),
        ):
            _checked(name, fn, checks)
    return checks


def _detail(resource: Mapping[str, Any]) -> dict[str, Any]:
    """``GET /v1/resources/{id}`` as :meth:`LocalBackend.show` gives it: the chunks summarised
    (their text's length as ``chars``)."""
    out = {k: v for k, v in resource.items() if k != "chunks"}
    out["chunks"] = [
        {
            "chunk_id": c["chunk_id"],
            "ordinal": c["ordinal"],
            "heading_path": c["heading_path"],
            "start_line": c["start_line"],
            "end_line": c["end_line"],
            "chars": len(c["text"]),
        }
        for c in resource["chunks"]
    ]
    return out


class RemoteBackend:
    """The operations of a running ``hybridsag serve`` at ``url`` with a bearer ``token``: what
    the token's role allows (a read token searches and reads; writes need ``write``, reconcile
    and audit ``admin``), scoped to its tenant for a tenant-scoped token, whatever a call's
    filters or tenant say. ``batch_size``: resources per request of :meth:`ingest_jsonl`;
    ``token_source``: where the token came from, as a refused token's AuthError names it
    (None: the CLI's setting, :data:`hybridsag.client.CLI_TOKEN_SOURCE`)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout_s: float = 120.0,
        batch_size: int = 256,
        token_source: str | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"url must be an http:// or https:// URL, got {url!r}")
        self.url = url.rstrip("/")
        self._token = token
        self._token_source = token_source
        self.timeout_s = timeout_s
        self.batch_size = batch_size

    def client(self) -> ServiceClient:
        """A new sync client of the service (the caller closes it)."""
        from hybridsag.client import CLI_TOKEN_SOURCE, ServiceClient

        return ServiceClient(
            self.url, token=self._token, timeout=self.timeout_s,
            token_source=self._token_source or CLI_TOKEN_SOURCE,
        )

    def close(self) -> None:
        """Nothing to close: every call opens and closes its own client."""

    def __enter__(self) -> RemoteBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- search ----------------------------------------------------------------------------------

    @staticmethod
    def _check(query: str) -> str:
        """The checks of ``validate_query`` that need no setting (blank, control characters),
        made here so the message is hybridsag's own; the length limit is the service's."""
        try:
            return validate_query(query, max_chars=MAX_QUERY_CHARS)
        except InputError as exc:
            raise _value_error(exc) from exc

    @staticmethod
    def _kwargs(options: SearchOptions) -> dict[str, Any]:
        return {
            "top_k": options.top_k,
            "paths": options.paths,
            "filters": options.filters,
            "include_stale": options.include_stale,
            "judge_order": options.judge_order,
            "weights": options.weights,
            "min_confidence": options.min_confidence,
        }

    def check_paths(self, paths: Sequence[str] | None) -> None:
        """Nothing to check before a search: the service knows its own paths and refuses an
        unknown one on each search (QueryValueError there)."""

    def warm(self, paths: Sequence[str] | None = None, *, query: str = "") -> dict[str, float]:
        """Nothing to build here: the service is warm (no steps, so ``{}``)."""
        return {}

    def query_terms(self, query: str) -> list[str]:
        """None: the service does not say its terms, so snippets are not highlighted."""
        return []

    def search(self, query: str, options: SearchOptions) -> dict[str, Any]:
        try:
            with self.client() as client:
                return client.search(
                    self._check(query), explain=options.explain, **self._kwargs(options)
                )
        except InputError as exc:
            raise _value_error(exc) from exc

    async def asearch(self, query: str, options: SearchOptions) -> dict[str, Any]:
        """``POST /v1/search`` over ``httpx.AsyncClient`` on the running event loop."""
        from hybridsag.client import CLI_TOKEN_SOURCE, AsyncServiceClient

        try:
            async with AsyncServiceClient(
                self.url, token=self._token, timeout=self.timeout_s,
                token_source=self._token_source or CLI_TOKEN_SOURCE,
            ) as client:
                return await client.search(
                    self._check(query), explain=options.explain, **self._kwargs(options)
                )
        except InputError as exc:
            raise _value_error(exc) from exc

    def search_agent(self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET) -> str:
        try:
            with self.client() as client:
                return client.search_agent(
                    self._check(query), budget=_budget(budget), **self._kwargs(options)
                )
        except InputError as exc:
            raise _value_error(exc) from exc

    async def asearch_agent(
        self, query: str, options: SearchOptions, budget: int = DEFAULT_BUDGET
    ) -> str:
        from hybridsag.client import CLI_TOKEN_SOURCE, AsyncServiceClient

        try:
            async with AsyncServiceClient(
                self.url, token=self._token, timeout=self.timeout_s,
                token_source=self._token_source or CLI_TOKEN_SOURCE,
            ) as client:
                return await client.search_agent(
                    self._check(query), budget=_budget(budget), **self._kwargs(options)
                )
        except InputError as exc:
            raise _value_error(exc) from exc

    # -- writes ----------------------------------------------------------------------------------

    def ingest(
        self, resources: Sequence[Mapping[str, Any]], *, mode: str | None = None
    ) -> dict[str, Any]:
        """``POST /v1/resources``: one bad entry refuses the batch (InputError naming it); a
        read token is refused (ForbiddenError). Returns the ingest report."""
        with self.client() as client:
            return client.ingest(list(resources), mode=mode)

    def ingest_jsonl(
        self, path: Path, *, mode: str | None = None, progress: IngestProgress | None = None
    ) -> dict[str, Any]:
        """The JSONL file in batches of ``batch_size``; bad lines are reported by
        ``file:line`` as in process, the rest is ingested."""
        ticks = as_progress(progress)
        path = Path(path)
        if progress is not None and path.is_file():
            with path.open("rb") as fh:
                ticks.start(sum(1 for line in fh if line.strip()))
        with self.client() as client:
            return client.ingest_jsonl(
                path,
                mode=mode,
                batch_size=self.batch_size,
                progress=lambda n: ticks.prepared(n, 0),
            )

    def sync_folder(
        self,
        path: Path,
        *,
        tenant: str = "",
        acl: Sequence[str] = (),
        prune: bool = True,
        progress: IngestProgress | None = None,
    ) -> dict[str, Any]:
        """The folder synced through the service (``ServiceClient.sync_folder``): a manifest
        first, then only the files the service does not hold."""
        with self.client() as client:  # tenant "": the token's own (an admin's: "")
            return client.sync_folder(
                Path(path), tenant=tenant or None, acl=tuple(acl), prune=prune, progress=progress
            )

    def delete(self, resource_id: str, *, tenant: str | None = None) -> bool:
        """``DELETE /v1/resources/{id}``; False when there is none (or none this token sees)."""
        with self.client() as client:
            try:
                return bool(client.delete(resource_id, tenant=tenant)["done"])
            except NotFoundError:
                return False

    def set_enabled(self, resource_id: str, enabled: bool, *, tenant: str | None = None) -> bool:
        """``POST /v1/resources/{id}/enable`` or ``/disable``; False when there is none."""
        with self.client() as client:
            try:
                return bool(client.set_enabled(resource_id, enabled, tenant=tenant)["done"])
            except NotFoundError:
                return False

    def exclusions(
        self, *, tenant: str | None = None, resource_id: str | None = None
    ) -> list[dict[str, Any]]:
        """``GET /v1/exclusions``: those the token may see (a tenant-scoped token's own)."""
        with self.client() as client:
            return client.exclusions(tenant=tenant, resource_id=resource_id)

    def include(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """``POST /v1/resources/{id}/include``; NotFoundError when that id is not excluded."""
        with self.client() as client:
            return client.include(resource_id, tenant=tenant)

    # -- reads -----------------------------------------------------------------------------------

    def list_resources(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        prefix: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """``GET /v1/resources``, page after page, up to ``limit``: the resources the token
        may see (a tenant-scoped token's tenant only; for an admin ``tenant`` narrows)."""
        _check_listing(status, limit)
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        with self.client() as client:
            while True:
                want = PAGE_MAX if limit is None else min(PAGE_MAX, limit - len(out))
                page = client.list_resources(
                    tenant=tenant, status=status, prefix=prefix, limit=want, cursor=cursor
                )
                out.extend(page["resources"])
                cursor = page["next_cursor"]
                if cursor is None or (limit is not None and len(out) >= limit):
                    return out

    def show(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any] | None:
        """``GET /v1/resources/{id}`` as :meth:`LocalBackend.show` gives it; None when there
        is none (or none this token sees)."""
        with self.client() as client:
            try:
                return _detail(client.resource(resource_id, tenant=tenant))
            except NotFoundError:
                return None

    # -- consistency and health ------------------------------------------------------------------

    def rebuild_vectors(self, *, progress: IngestProgress | None = None) -> dict[str, Any]:
        """Refused (InputError): the service has no such endpoint; it runs where the data dir
        is, with the service stopped."""
        raise InputError(
            f"rebuild-vectors runs in process, on the data dir of the service at {self.url}: "
            "stop the service and run it there without --server"
        )

    def reconcile(self, *, dry_run: bool, force: bool = False) -> dict[str, Any]:
        """``POST /v1/reconcile`` (an admin token): the audit report; ConsistencyError when
        refused."""
        with self.client() as client:
            return client.reconcile(dry_run=dry_run, force=force)

    def audit(self) -> dict[str, Any]:
        """``GET /v1/audit/latest`` (an admin token); NotFoundError when there is no report
        yet."""
        with self.client() as client:
            return client.audit_latest()

    def health(self) -> dict[str, str]:
        """The service's checks: that it answers and its version (``service``), the token's
        name, role and tenant (``token``), and ``/readyz``: each component's check when the
        token may see them (an admin's, or ``server.public_metrics``), else ready or not."""
        from hybridsag import __version__

        checks: dict[str, str] = {}
        me: dict[str, Any] = {}

        def service() -> str:
            with self.client() as client:
                me.update(client.whoami())
            theirs = me.get("version")
            also = "" if theirs == __version__ else f" (this client: {__version__})"
            return f"{self.url}: hybridsag {theirs}{also}"

        def token() -> str:
            scope = "every tenant" if me["tenant"] is None else f"tenant {me['tenant']!r}"
            acl = f", ACL tags {', '.join(me['acl'])}" if me.get("acl") else ""
            return f"{me['name']!r}, role {me['role']} ({scope}{acl})"

        if not _checked("service", service, checks):
            return checks
        _checked("token", token, checks)
        with self.client() as client:
            try:
                status, body = client.readiness()
            except ForbiddenError:  # the detail needs an admin token: ready or not is public
                status, body = client.readiness(token=False)
        if status not in (200, 503):
            checks["ready"] = f"failed: /readyz answered HTTP {status}"
            return checks
        for name, text in (body.get("checks") or {}).items():
            ok = text.startswith(("ok", "off"))
            checks[name] = text if ok else f"failed: {text.removeprefix('failed: ')}"
        if body.get("ready"):
            checks["ready"] = "ok: ready" + (
                "" if body.get("checks") else " (each component's check needs an admin token)"
            )
        else:
            checks["ready"] = "failed: not ready"
        return checks

    def writes_granted(self) -> bool:
        """Whether the token's role may write (``GET /v1/whoami``: ``write`` or ``admin``)."""
        with self.client() as client:
            return client.whoami()["role"] in ("write", "admin")

    # -- experiments -----------------------------------------------------------------------------

    def experiments(self) -> list[dict[str, Any]]:
        with self.client() as client:
            return client.experiments()

    def experiment(self, name: str) -> dict[str, Any]:
        with self.client() as client:
            return client.experiment(name)

    def define_experiment(self, definition: Mapping[str, Any]) -> dict[str, Any]:
        with self.client() as client:
            return client.define_experiment(definition)

    def set_experiment_active(self, name: str, active: bool) -> dict[str, Any]:
        with self.client() as client:
            return client.set_experiment_active(name, active)

    def experiment_report(self, name: str, *, tenant: str | None = None) -> dict[str, Any]:
        """The report the token may see: its tenant's traffic (a tenant token), every
        tenant's or ``tenant``'s (an admin)."""
        with self.client() as client:
            return client.experiment_report(name, tenant=tenant)

    def keep_experiment_report(self, name: str) -> Path | None:
        """None: a service computes reports on request and writes no file."""
        return None

    def feedback(
        self,
        query_id: str,
        *,
        position: int | None = None,
        chunk_id: str | None = None,
        kind: str = "click",
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """``POST /v1/feedback``; the token decides the scope, so ``tenant`` must be None or
        the token's own (ForbiddenError otherwise is the service's to say)."""
        if tenant is not None:
            raise InputError(
                "feedback through a service is scoped by the token's tenant; leave tenant out"
            )
        with self.client() as client:
            return client.feedback(query_id, position=position, chunk_id=chunk_id, kind=kind)


def open_backend(settings: Settings) -> LocalBackend | RemoteBackend:
    """The backend of ``settings``: a :class:`RemoteBackend` of ``server.url`` (``--server``)
    with ``server.client_token`` (else ``server.token``) when the URL is set, else a
    :class:`LocalBackend` that opens the data dir itself (refused while a service holds it).
    Nothing is opened or connected here."""
    s = settings.server
    if s.url is not None:
        token = s.client_token or s.token
        return RemoteBackend(
            s.url,
            token=token.get_secret_value() if token is not None else None,
            timeout_s=s.client_timeout_s,
            batch_size=s.max_batch,
        )
    return LocalBackend.from_settings(settings)


#: Where a framework adapter's token comes from, as a refused token's AuthError names it.
ADAPTER_TOKEN_SOURCE = "check the token= argument"


def make_backend(
    hybrid_search: HybridSearch | None = None,
    *,
    url: str | None = None,
    token: str | None = None,
    timeout_s: float = 120.0,
) -> LocalBackend | RemoteBackend:
    """The backend for exactly one of ``hybrid_search`` (in process; the caller closes it) and
    ``url`` (a service), as the framework adapters take them: a token the service refuses is
    an AuthError naming the adapter's ``token=`` argument.

    Raises:
        ConfigError: both or neither given, or a ``url`` that is not http(s).
    """
    if (hybrid_search is None) == (url is None):
        raise ConfigError("give either hybrid_search (in process) or url (a running service)")
    if hybrid_search is not None:
        return LocalBackend(hybrid_search)
    assert url is not None
    return RemoteBackend(url, token=token, timeout_s=timeout_s, token_source=ADAPTER_TOKEN_SOURCE)

