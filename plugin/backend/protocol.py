"""The :class:`Backend` protocol every face calls, and the input checks both implementations
share. A search takes the query and one :class:`~hybridsag.request.SearchOptions` (re-exported
here with its :class:`~hybridsag.request.QueryValueError`), built and checked at the face.

:func:`query_errors` turns the ``InputError`` a search raises into a :class:`QueryValueError`,
in process (:mod:`hybridsag.backend.local`) and through a service
(:mod:`hybridsag.backend.remote`) alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hybridsag.errors import InputError
from hybridsag.ingest.progress import IngestProgress
from hybridsag.output.budget import DEFAULT_BUDGET, check_budget
from hybridsag.lazy import moved_names
from hybridsag.request import FeedbackOptions, FolderOptions, ListingOptions, QueryValueError, SearchOptions

if TYPE_CHECKING:
    from hybridsag.results import SearchResponse

__all__ = [
    "MAX_QUERY_CHARS",
    "PAGE_MAX",
    "Backend",
    "checked_budget",
    "query_errors",
]

#: check_listing moved to hybridsag.request (issue 41): imported from here for one release, with a
#: DeprecationWarning; QueryValueError and SearchOptions are imported from hybridsag.backend.
MOVED = {"check_listing": "hybridsag.request"}
__getattr__ = moved_names(__name__, MOVED)

#: The longest query the service's schema admits (its ``query.max_chars`` may be lower).
MAX_QUERY_CHARS = 1_000_000
#: The most resources one page of ``GET /v1/resources`` holds (and its default size).
PAGE_MAX = 1000


@contextmanager
def query_errors() -> Iterator[None]:
    """Bad input raised inside (an :class:`~hybridsag.errors.InputError`) leaves as a
    :class:`QueryValueError` with the same message, raised from it."""
    try:
        yield
    except InputError as exc:
        raise QueryValueError(str(exc)) from exc


def checked_budget(budget: int) -> int:
    """``budget`` (characters of agent text) checked; QueryValueError naming a bad one."""
    try:
        return check_budget(budget)
    except ValueError as exc:
        raise QueryValueError(str(exc)) from exc


class Backend(Protocol):
    """The operations every face uses, in process (:class:`LocalBackend`) or over a running
    service (:class:`RemoteBackend`); both take and return the same values: a search's typed
    response, JSON-shaped values for the rest.

    An operation with options takes them as one checked object from
    :mod:`hybridsag.request`, or as its fields in keywords (:func:`~hybridsag.request.options_of`).

    Searching: ``search`` returns the typed :class:`~hybridsag.results.SearchResponse` (through
    a service, read from its JSON), so that only the HTTP and CLI edges turn it into JSON;
    ``search_agent`` its agent text (:func:`hybridsag.output.agent.agent_text`); bad input is a
    :class:`QueryValueError`.
    ``warm`` builds what a search over ``paths`` needs and returns the milliseconds of each
    step (nothing to build through a service); ``query_terms`` are the terms a result's
    snippet highlights (none through a service, which does not say them); ``check_paths``
    refuses, where it can tell before a search, a path the searching side cannot run.

    Writing: ``ingest`` takes resources as ``POST /v1/resources`` does (``id``, ``text``,
    optional ``title``, ``metadata``, ``tenant``, ``acl``, ``format``; one bad entry refuses
    the batch), ``ingest_jsonl`` a JSONL file (bad lines reported by ``file:line``),
    ``sync_folder`` a folder (:class:`~hybridsag.request.FolderOptions`: its tenant, ACL tags,
    and ``prune``: the resources of the folder whose files are gone are removed); each returns the ingest report. ``delete`` and ``set_enabled`` answer
    False when there is no such resource (or none the caller may see). A folder file deleted
    while it stays on disk is kept out of its folder's index: ``exclusions`` lists those
    (``Exclusion.as_dict()``), ``include`` lifts one and indexes the file again (the ingest
    report; ``NotFoundError`` when that id is not excluded).

    ``writes_granted`` says who decides whether this caller may write: through a service its
    token's role (True for ``write`` and ``admin``, False for ``read``: the service would refuse
    every write); in process nothing grants or refuses them (None: the face's own setting, such
    as ``mcp.allow_writes``, decides).

    Reading: ``list_resources`` (:class:`~hybridsag.request.ListingOptions`) as ``hybridsag
    list`` lists them (``ResourceSummary.as_dict()``,
    oldest first; a tenant-scoped token sees only its own), ``show`` one resource
    (``ResourceDetail.as_dict()``) or None.

    Consistency and health: ``rebuild_vectors`` gives the data dir its own collection and
    re-embeds every chunk into it (in process only), ``reconcile`` returns the audit report
    (``ConsistencyError`` when refused), ``audit`` the newest one (``NotFoundError`` when there
    is none yet); ``health`` the checks
    a ``doctor`` shows, name -> ``"ok: ..."`` or ``"failed: ..."``.

    Experiments (hybridsag.ab): their states, one's state, define, start/stop, report (of one
    tenant's traffic, or every tenant's), where the report is kept (in process under the data
    dir; a service keeps none: None), and feedback on a result shown under one
    (:class:`~hybridsag.request.FeedbackOptions`: its position or chunk id, and kind).
    """

    def search(self, query: str, options: SearchOptions) -> SearchResponse: ...

    async def asearch(self, query: str, options: SearchOptions) -> SearchResponse: ...

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
        options: FolderOptions | None = None,
        *,
        progress: IngestProgress | None = None,
        **keywords: Any,
    ) -> dict[str, Any]: ...

    def delete(self, resource_id: str, *, tenant: str | None = None) -> bool: ...

    def set_enabled(self, resource_id: str, enabled: bool, *, tenant: str | None = None) -> bool: ...

    def exclusions(
        self, *, tenant: str | None = None, resource_id: str | None = None
    ) -> list[dict[str, Any]]: ...

    def include(self, resource_id: str, *, tenant: str | None = None) -> dict[str, Any]: ...

    def list_resources(
        self, options: ListingOptions | None = None, **keywords: Any
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
        self, query_id: str, options: FeedbackOptions | None = None, *, tenant: str | None = None,
        **keywords: Any,
    ) -> dict[str, Any]: ...

    def close(self) -> None: ...
