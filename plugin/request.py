"""What a search passes besides the query: :class:`SearchOptions`, built and checked once at the
edge (the CLI's flags, a service request, the MCP tool, a framework adapter) and carried whole to
:meth:`hybridsag.search.HybridSearch.search`, in process or through a service. No layer under the
edge unpacks it into keywords or checks it again. The other operations that take options have
theirs here too, checked the same way: :class:`ListingOptions` (a listing of resources),
:class:`FolderOptions` (a folder indexed or synced) and :class:`FeedbackOptions` (feedback on a
result shown under an experiment). :func:`options_of` is the keyword shorthand every layer that
takes one offers (``hs.list_resources(limit=3)``).

Bad options are a :class:`QueryValueError`: hybridsag's :class:`~hybridsag.errors.QueryError`
that is also the ``ValueError`` the frameworks expect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from hybridsag.errors import InputError, QueryError
from hybridsag.paths import check_weights
from hybridsag.records.filters import Filters
from hybridsag.records.schema import STATUSES

__all__ = [
    "FeedbackOptions",
    "FolderOptions",
    "ListingOptions",
    "QueryValueError",
    "SearchOptions",
    "check_listing",
    "options_of",
]

_Options = TypeVar(
    "_Options", "SearchOptions", "ListingOptions", "FolderOptions", "FeedbackOptions"
)


def options_of(kind: type[_Options], options: _Options | None, keywords: Mapping[str, Any]) -> _Options:
    """The options an operation runs with: ``options`` as given, built from ``keywords`` (the
    shorthand ``search(q, top_k=5)`` for ``search(q, SearchOptions(top_k=5))``), or ``options``
    with those fields replaced; checked again when built either way.

    Args:
        kind: The options type (:class:`SearchOptions`, :class:`ListingOptions`,
            :class:`FolderOptions`, :class:`FeedbackOptions`).
        options: The options built at the edge; None: built from ``keywords``.
        keywords: Fields of ``kind``; an unknown one is a TypeError.

    >>> options_of(ListingOptions, None, {"limit": 3}).limit
    3
    """
    if options is None:
        return kind(**keywords)
    return replace(options, **keywords) if keywords else options


class QueryValueError(QueryError, ValueError):
    """Bad search input: hybridsag's :class:`QueryError` that is also the ``ValueError`` the
    frameworks expect. ``__cause__`` is the original error, when there is one."""


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """What a search passes besides the query; checked when built, so whoever receives one
    reads it as it is.

    A field left None takes the searching side's setting (in process this
    :class:`~hybridsag.settings.Settings`; through a service, the service's).

    Attributes:
        top_k: How many results, an integer in 1..1000; None: ``search.top_k``.
        paths: The recall paths to run (:data:`~hybridsag.paths.PATHS` names), as a sequence
            or one comma-separated string (kept as a tuple); None or empty: ``search.paths``.
            The searching side refuses a name it has not registered.
        filters: Who may see what: a :class:`~hybridsag.records.filters.Filters` or a mapping
            of its keys (``tenant``, ``acl``, ``metadata``, ``resource_ids``, ``statuses``);
            empty: unscoped, ``ready`` resources only.
        include_stale: Show results whose source file changed on disk (True) or hold them
            back and count them (False); None: ``search.include_stale``.
        judge_order: Keep the judge's order for what it scored; None: ``fusion.judge_order``.
        weights: Path name -> fusion weight (a number in 0..100) for this search; None:
            ``fusion.weights``.
        explain: Word each result's ``why``; False leaves it empty.
        min_confidence: A number in 0..1: a response whose confidence is below it returns no
            results (``withheld`` says why); None: never withhold.

    Raises:
        QueryValueError: a ``top_k`` out of range, a bad filter, weight, ``judge_order`` or a
            ``min_confidence`` outside 0..1, naming it.

    >>> SearchOptions(top_k=3, paths="bm25, title").paths
    ('bm25', 'title')
    """

    top_k: int | None = None
    paths: Sequence[str] | None = None
    filters: Mapping[str, Any] | Filters = field(default_factory=dict)
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
        paths = self.paths
        if isinstance(paths, str):
            object.__setattr__(
                self, "paths", tuple(p.strip() for p in paths.split(",") if p.strip())
            )
        elif paths is not None:
            object.__setattr__(self, "paths", tuple(paths))
        if self.weights is not None:
            try:
                object.__setattr__(self, "weights", check_weights(self.weights))
            except ValueError as exc:
                raise QueryValueError(str(exc)) from None
        judge_order = self.judge_order
        if judge_order is not None and not isinstance(judge_order, bool):
            raise QueryValueError(f"judge_order must be true or false, got {judge_order!r}")
        floor = self.min_confidence
        if floor is not None and (
            isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor <= 1
        ):  # NaN fails the range too
            raise QueryValueError(f"min_confidence must be a number in 0..1, got {floor!r}")
        try:
            Filters.from_mapping(self.filters)
        except InputError as exc:
            raise QueryValueError(str(exc)) from exc

    def scope(self) -> Filters:
        """The filters as the stores apply them (already checked)."""
        return Filters.from_mapping(self.filters)


@dataclass(frozen=True, slots=True)
class ListingOptions:
    """What a listing of resources takes, checked when built (:func:`check_listing`), so that
    the CLI, the service, the client and both backends pass it whole.

    Attributes:
        tenant: Only this tenant's; None: every tenant's (through a service, what the token
            may see).
        status: Only resources in this status (one of
            :data:`~hybridsag.records.schema.STATUSES`); None: any.
        prefix: Only ids that start with it; None: any.
        limit: At most this many (a positive integer); None: all.

    Raises:
        InputError: an unknown status, or a limit that is not a positive integer, naming it.

    >>> ListingOptions(status="ready", limit=2).statuses
    ('ready',)
    """

    tenant: str | None = None
    status: str | None = None
    prefix: str | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        check_listing(self.status, self.limit)

    @property
    def statuses(self) -> tuple[str, ...] | None:
        """The statuses listed, as the store takes them (None: any)."""
        return (self.status,) if self.status else None


@dataclass(frozen=True, slots=True)
class FolderOptions:
    """What indexing a folder (or one file in it) takes besides its path, in process
    (:meth:`hybridsag.search.HybridSearch.ingest_folder`) or synced through a service.

    Attributes:
        tenant: The tenant its resources land in (``""``: un-tenanted; through a service,
            the token's own).
        acl: The ACL tags every resource of the folder gets (kept as a tuple).
        prune: Delete the folder's resources whose files are gone.

    Raises:
        QueryError: a tenant or tag a resource cannot have, as a search's filters refuse it
            (``filters.tenant ...``).

    >>> FolderOptions(acl=["staff"]).acl
    ('staff',)
    """

    tenant: str = ""
    acl: Sequence[str] = ()
    prune: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "acl", tuple(self.acl))
        if self.tenant or self.acl:  # checked as a search's filters are
            Filters(tenant=self.tenant, acl=self.acl)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class FeedbackOptions:
    """What feedback on a result of a search answered under an experiment says besides that
    search's ``query_id``, carried whole from the face (``POST /v1/feedback``, the client, a
    backend) to :meth:`hybridsag.ab.online.Experiments.feedback`. Its fields are checked
    there, against the impression the ``query_id`` names (what was shown decides which
    position or chunk is valid), so that every face gets the same error for the same value.

    Attributes:
        position: The result's 1-based position in that response (give this or
            ``chunk_id``).
        chunk_id: The result's chunk id.
        kind: What the user did: ``"click"``, ``"skip"``, ``"like"`` or ``"dislike"``.

    >>> FeedbackOptions(position=2).kind
    'click'
    """

    position: int | None = None
    chunk_id: str | None = None
    kind: str = "click"


def check_listing(status: str | None, limit: int | None) -> None:
    """What a listing of resources takes besides the tenant and prefix, checked once for every
    face: InputError naming an unknown resource ``status`` (valid ones listed) or a ``limit``
    that is not a positive integer.

    Args:
        status: One of :data:`~hybridsag.records.schema.STATUSES`, or None for any.
        limit: A positive integer, or None for no limit.
    """
    if status is not None and status not in STATUSES:
        raise InputError(f"unknown status {status!r}; valid: {', '.join(STATUSES)}")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InputError(f"limit must be a positive integer, got {limit!r}")
