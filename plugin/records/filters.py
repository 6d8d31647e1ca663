"""Who may see what: :class:`Filters` (tenant, ACL tags, metadata, resource ids, statuses),
checked when made, turned into the SQL every path's own query applies
(:meth:`Filters.sql`) and applied again to a record after fusion (:meth:`Filters.allows`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hybridsag.errors import QueryError
from hybridsag.records.dialect import SqliteBackend, placeholders
from hybridsag.records.keys import public_id_sql, resource_key
from hybridsag.records.schema import SEARCHABLE_STATUSES

if TYPE_CHECKING:
    from hybridsag.records.dialect import Backend
    from hybridsag.records.rows import ResourceRecord

__all__ = ["Filters", "MAX_FILTER_CHARS", "MAX_FILTER_IDS", "MAX_FILTER_TAGS"]

_META_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
#: Bounds on one filter: characters of a tenant, tag or id; tags or metadata keys; resource ids.
MAX_FILTER_CHARS = 1024
MAX_FILTER_TAGS = 256
MAX_FILTER_IDS = 10_000
#: SQLite's INTEGER range (a larger int cannot be bound as a parameter).
_INT64 = (-(2**63), 2**63 - 1)


def _check_filter_text(name: str, value: object, *, allow_empty: bool) -> None:
    """A filter string that can be bound and compared: a str of at most
    :data:`MAX_FILTER_CHARS` characters without control characters or lone surrogates (no
    stored tenant, tag or id holds them, and SQLite cannot bind a lone surrogate)."""
    if not isinstance(value, str):
        raise QueryError(f"{name} must be a string, got {type(value).__name__}: {value!r:.80}")
    if not allow_empty and not value:
        raise QueryError(f"{name} must not be empty, got {value!r}")
    if len(value) > MAX_FILTER_CHARS:
        raise QueryError(f"{name} is {len(value)} characters; at most {MAX_FILTER_CHARS}")
    _check_text_chars(name, value)


def _check_text_chars(name: str, value: str) -> None:
    for pos, ch in enumerate(value):
        kind = unicodedata.category(ch)
        if kind == "Cc":
            raise QueryError(f"{name} {value!r:.80} holds control character {ch!r} at {pos}")
        if kind == "Cs":
            raise QueryError(
                f"{name} {value!r:.80} holds a lone surrogate {ch!r} at {pos} (not valid UTF-8)"
            )


def _check_count(name: str, values: Sized, limit: int) -> None:
    if len(values) > limit:
        raise QueryError(f"{name} holds {len(values)} entries; at most {limit}")


def _check_meta_value(key: str, value: object) -> None:
    """A metadata filter value: a str (as filter text), a bool, an int in SQLite's range or a
    finite float."""
    where = f"filters.metadata[{key!r}]"
    if isinstance(value, str):
        if len(value) > MAX_FILTER_CHARS:
            raise QueryError(f"{where} is {len(value)} characters; at most {MAX_FILTER_CHARS}")
        _check_text_chars(where, value)
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise QueryError(f"{where}={value!r:.40} is outside the 64-bit integer range")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise QueryError(f"{where}={value!r} must be a finite number")
    else:
        raise QueryError(f"{where}={value!r:.80}: only str, int, float, bool compare")


@dataclass(frozen=True, slots=True)
class Filters:
    """Who may see what, applied inside every path's own query and again after fusion.

    Attributes:
        tenant: Only that tenant's resources; None: every tenant's.
        acl: The caller's tags; a resource with tags is visible only when it shares one, a
            resource without tags is public. None: no ACL check.
        metadata: Equality on top-level metadata keys.
        resource_ids: Only these public ids, of ``tenant`` when it is set, of any tenant
            otherwise; None: any id.
        statuses: ``("ready",)`` unless a caller also asks for ``disabled`` ones.

    Raises:
        QueryError: a value of the wrong type, too many tags, ids or keys, or text that cannot
            be stored (the message names it).
    """

    tenant: str | None = None
    acl: tuple[str, ...] | None = None
    metadata: Mapping[str, str | int | float | bool] = field(default_factory=dict)
    resource_ids: tuple[str, ...] | None = None
    statuses: tuple[str, ...] = ("ready",)

    def __post_init__(self) -> None:
        for name in ("acl", "resource_ids", "statuses"):
            value = getattr(self, name)
            if isinstance(value, list | set | frozenset):
                object.__setattr__(self, name, tuple(value))
            elif value is not None and not isinstance(value, tuple):
                # a str would be read as a sequence of characters, a dict as its keys
                raise QueryError(
                    f"filters.{name} must be a tuple of strings, got {type(value).__name__}: "
                    f"{value!r:.80}"
                )
        if self.tenant is not None:
            _check_filter_text("filters.tenant", self.tenant, allow_empty=True)
        if self.acl is not None:
            _check_count("filters.acl", self.acl, MAX_FILTER_TAGS)
            for tag in self.acl:
                _check_filter_text("filters.acl tag", tag, allow_empty=False)
        if not isinstance(self.metadata, Mapping):
            raise QueryError(
                f"filters.metadata must be a mapping, got {type(self.metadata).__name__}: "
                f"{self.metadata!r:.80}"
            )
        _check_count("filters.metadata", self.metadata, MAX_FILTER_TAGS)
        for key, value in self.metadata.items():
            if not isinstance(key, str) or not _META_KEY.match(key):
                raise QueryError(
                    f"filters.metadata key {key!r:.80} is not allowed (1 to 128 of letters, "
                    "digits, _ . -)"
                )
            _check_meta_value(key, value)
        if self.resource_ids is not None:
            _check_count("filters.resource_ids", self.resource_ids, MAX_FILTER_IDS)
            for rid in self.resource_ids:
                _check_filter_text("filters.resource_ids entry", rid, allow_empty=False)
        if not self.statuses:
            raise QueryError("filters.statuses must not be empty")
        for status in self.statuses:
            if not isinstance(status, str) or status not in SEARCHABLE_STATUSES:
                raise QueryError(
                    f"filters.statuses: {status!r:.80} is not searchable; valid: "
                    f"{SEARCHABLE_STATUSES}"
                )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | Filters | None) -> Filters:
        """Build from a plain mapping (API/CLI/HTTP). Unknown keys, a value of the wrong type
        (``filters=['tenant']``, ``{"acl": 5}``) and text that cannot be stored (lone
        surrogates, control characters) are a :class:`~hybridsag.errors.QueryError` naming it.

        Args:
            data: A mapping of the keys above (a str for ``acl``, ``resource_ids`` or
                ``statuses`` is one item); a ``Filters`` is returned as is; None: the default.
        """
        if data is None:
            return cls()
        if isinstance(data, Filters):
            return data
        if not isinstance(data, Mapping):
            raise QueryError(
                f"filters must be a mapping such as {{'tenant': 't1'}}, got "
                f"{type(data).__name__}: {data!r:.80}"
            )
        allowed = {"tenant", "acl", "metadata", "resource_ids", "statuses"}
        unknown = [k for k in data if k not in allowed]
        if unknown:
            names = sorted(repr(k)[:80] for k in unknown)
            raise QueryError(f"unknown filter [{', '.join(names)}]; valid: {sorted(allowed)}")
        kwargs: dict[str, Any] = dict(data)
        for key in ("acl", "resource_ids", "statuses"):
            if key in kwargs and kwargs[key] is not None:
                if isinstance(kwargs[key], str):
                    kwargs[key] = (kwargs[key],)
                if not isinstance(kwargs[key], list | tuple | set | frozenset):
                    raise QueryError(
                        f"filters.{key} must be a list of strings, got "
                        f"{type(kwargs[key]).__name__}: {kwargs[key]!r:.80}"
                    )
                kwargs[key] = tuple(kwargs[key])
        if "statuses" in kwargs and kwargs["statuses"] is None:
            del kwargs["statuses"]
        if kwargs.get("metadata") is None:
            kwargs.pop("metadata", None)
        return cls(**kwargs)

    def sql(self, alias: str = "r", dialect: Backend | None = None) -> tuple[str, list[Any]]:
        """A WHERE fragment over the resources table aliased ``alias``, and its parameters, in
        the SQL of ``dialect`` (a store's :attr:`Store.backend`; default SQLite).

        Args:
            alias: The resources table's alias in the statement.
            dialect: The store's SQL dialect; None: SQLite.
        """
        d: Any = dialect if dialect is not None else SqliteBackend
        parts = [f"{alias}.status IN ({','.join('?' * len(self.statuses))})"]
        params: list[Any] = list(self.statuses)
        if self.tenant is not None:
            parts.append(f"{alias}.tenant = ?")
            params.append(self.tenant)
        if self.acl is not None:
            parts.append(f"({alias}.acl = '[]' OR {d.acl_any_sql(alias, len(self.acl))})")
            params.extend(self.acl)
        for key, value in sorted(self.metadata.items()):
            # the JSON type as well as the value, so that true never equals 1, nor the string
            # '["x"]' a stored list: the same test as :meth:`allows`.
            fragment, values = d.metadata_eq_sql(alias, key, value)
            parts.append(fragment)
            params.extend(values)
        if self.resource_ids is not None:
            marks = placeholders(len(self.resource_ids))
            if self.tenant is not None:  # the keys of that tenant's ids: the unique index
                parts.append(f"{alias}.resource_id IN ({marks})")
                params.extend(resource_key(rid, self.tenant) for rid in self.resource_ids)
            else:  # those ids in any tenant
                parts.append(f"{public_id_sql(alias)} IN ({marks})")
                params.extend(self.resource_ids)
        return " AND ".join(parts), params

    def allows(self, record: ResourceRecord) -> bool:
        """The same test as :meth:`sql`, in Python (the post-fusion check).

        Args:
            record: The resource to test.
        """
        if record.status not in self.statuses:
            return False
        if self.tenant is not None and record.tenant != self.tenant:
            return False
        if self.acl is not None and record.acl and not set(record.acl) & set(self.acl):
            return False
        for key, value in self.metadata.items():
            if key not in record.metadata or record.metadata[key] != value:
                return False
            if isinstance(value, bool) != isinstance(record.metadata[key], bool):
                return False
        if self.resource_ids is not None and record.resource_id not in self.resource_ids:
            return False
        return True
