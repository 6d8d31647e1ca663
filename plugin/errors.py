"""The one exception tree of hybridsag.

Every error the library raises is a :class:`HybridSagError`. ``retriable`` tells a caller whether
the same call may succeed later (a timeout, a 429) or never will (bad input, a refused key)::

    HybridSagError(retriable)
    ├── ConfigError            settings that cannot work (bad value, missing model, wrong tokenizer)
    │   └── IndexMismatchError an index built with another tokenizer / embedder / chunker
    ├── InputError             bad caller input: empty or over-long query, bad filter, bad file
    │   ├── QueryError
    │   ├── IngestError
    │   ├── NotFoundError      no such resource (or none this caller may see)
    │   └── ServiceHoldsDataDir  a running service holds the data dir: go through it (--server)
    ├── AuthError              HTTP service: a missing or unknown bearer token (401)
    │   └── ForbiddenError     a token without the role, tenant or ACL tag asked for (403)
    ├── OverloadError          HTTP service: too many requests in flight (retriable; 429)
    ├── WriteCancelledError    a write stopped at a cancellation point (shutdown; retriable)
    ├── ServiceError           HTTP service: failed or unreachable, as the CLI client sees it
    ├── StoreError             the system of record (SQLite or PostgreSQL) failed
    │   └── CorruptStoreError  the data dir's store is damaged (not SQLite, truncated, empty)
    ├── LexicalError           the lexical index (FTS5 or PostgreSQL) failed
    ├── DenseError             the embedder or Milvus failed (a remote embedder's bad answer too)
    │   └── DenseBudgetError       the search's remote budget is spent (also a BudgetError)
    ├── JudgeError             the judge failed
    │   ├── JudgeTimeoutError      (retriable)
    │   ├── JudgeResponseError     a reply that breaks the wire contract, or an HTTP error
    │   └── JudgeBudgetError       the search's remote budget is spent (also a BudgetError)
    ├── BudgetError            a search's remote budget (search.remote_budget_calls / _ms) is
    │                          spent: the part that needed the call degrades, the search goes on
    └── ConsistencyError       reconcile refused (mass-delete guard, lease held) or failed

Messages name the bad value and, where there is a closed set, list the valid ones. The CLI alone
turns these into exit codes: :class:`InputError`, :class:`ConfigError`, :class:`AuthError` and
:class:`CorruptStoreError` are 2 (nothing will work until someone fixes them), everything else 1.
The HTTP service alone turns them into status codes (input 422, not found 404, auth 401/403,
overload 429, consistency refused 409, backend 503). No message ever holds a token or key.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BudgetError",
    "ConfigError",
    "AuthError",
    "ConsistencyError",
    "CorruptStoreError",
    "DenseBudgetError",
    "DenseError",
    "ForbiddenError",
    "HybridSagError",
    "IndexMismatchError",
    "IngestError",
    "InputError",
    "JudgeBudgetError",
    "JudgeError",
    "JudgeResponseError",
    "JudgeTimeoutError",
    "LexicalError",
    "NotFoundError",
    "OverloadError",
    "QueryError",
    "ServiceError",
    "ServiceHoldsDataDir",
    "StoreError",
    "WriteCancelledError",
]


class HybridSagError(Exception):
    """Base of every hybridsag error; ``retriable`` says whether retrying may help.

    Args:
        message: What went wrong, naming the bad value.
        retriable: Whether retrying may help; None: the class's ``default_retriable``.
        loc: Where the bad value is in a request, as FastAPI writes ``detail[].loc``
            (``["body", 0, "_id"]``); None: the class's ``default_loc`` (None where no request
            field is to blame). The service's error body and the client's errors carry it.

    ``retry_after_s``: when to try again, for an error that knows (an overload's); None: the
    service's ``server.retry_after_s`` where it answers 429 or 503.
    """

    default_retriable = False
    default_loc: tuple[str | int, ...] | None = None
    retry_after_s: float | None = None

    def __init__(
        self,
        message: str,
        *,
        retriable: bool | None = None,
        loc: Sequence[str | int] | None = None,
    ) -> None:
        super().__init__(message)
        self.retriable = self.default_retriable if retriable is None else retriable
        if loc is None and self.default_loc is not None:
            loc = self.default_loc
        self.loc: list[str | int] | None = None if loc is None else list(loc)


class ConfigError(HybridSagError):
    """Settings that cannot work: a bad value, a missing model, an unknown backend name."""


class IndexMismatchError(ConfigError):
    """The index was built with another tokenizer, embedder or chunker; rebuild it."""


class InputError(HybridSagError):
    """Bad caller input. The CLI exits 2, the HTTP service answers 422."""


class QueryError(InputError):
    """A query that cannot be searched: empty, too long, control characters, bad filter."""


class IngestError(InputError):
    """A resource that cannot be ingested: bad id, not UTF-8, unreadable file."""


class NotFoundError(InputError):
    """No such resource, or none the caller may see (the two are not told apart)."""


class ServiceHoldsDataDir(InputError):
    """A command would open the index of a data dir that a running ``hybridsag serve`` holds
    (:mod:`hybridsag.records.service_lock`): with the embedded Milvus Lite only one process may open
    it, and the service is the data dir's writer, so the command goes through the service.
    ``data_dir``, ``pid`` and ``url`` name the holder; the message names the ``--server`` form.
    """

    def __init__(self, data_dir: object, pid: int, url: str) -> None:
        super().__init__(
            f"the data dir {data_dir} is held by a running service (pid {pid}, {url}); run: "
            f"hybridsag --server {url} <command>"
        )
        self.data_dir = data_dir
        self.pid = pid
        self.url = url

    def with_command(self, command: str) -> str:
        """The message with ``<command>`` replaced by the command line to run instead."""
        return str(self).replace("<command>", command)


class AuthError(HybridSagError):
    """A missing or unknown bearer token (HTTP 401)."""


class ForbiddenError(AuthError):
    """A known token without the role, tenant or ACL tag the request needs (HTTP 403)."""


class OverloadError(HybridSagError):
    """Too many requests in flight; ``retry_after_s`` says when to try again (HTTP 429)."""

    default_retriable = True

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class WriteCancelledError(HybridSagError):
    """A write stopped at a cancellation point because its ``cancel`` event was set (the service
    shutting down): the batch in flight was undone as a failed one is, batches committed before
    stay; ``report`` is their :class:`~hybridsag.documents.IngestReport` (None when unknown). The
    same write may be sent again (retriable; the service answers 503)."""

    default_retriable = True

    def __init__(self, message: str, *, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class ServiceError(HybridSagError):
    """The HTTP service failed (5xx) or could not be reached, as its client sees it."""

    default_retriable = True


class StoreError(HybridSagError):
    """The SQLite system of record failed."""


class CorruptStoreError(StoreError):
    """The data dir's SQLite store is damaged: not an SQLite file, truncated, or empty where a
    store was. Never repaired or reset silently: restore it or rebuild the index."""


class LexicalError(HybridSagError):
    """The FTS5 lexical path failed."""


class DenseError(HybridSagError):
    """The embedder or the Milvus vector store failed."""


class BudgetError(HybridSagError):
    """A search's budget of remote calls or milliseconds (``search.remote_budget_calls``,
    ``search.remote_budget_ms``) is spent. Never raised out of a search: the path that needed
    the call degrades (the SAG2 judge keeps what it had, even under ``judge.on_failure =
    "raise"``; the dense path is left out) and the response says so. Each family raises its own
    subclass (:class:`DenseBudgetError`, :class:`JudgeBudgetError`)."""


class DenseBudgetError(DenseError, BudgetError):
    """A remote embedder call refused because the search's remote budget is spent."""


class JudgeError(HybridSagError):
    """The judge failed."""


class JudgeTimeoutError(JudgeError):
    """The judge did not answer in time."""

    default_retriable = True


class JudgeResponseError(JudgeError):
    """The judge answered with an HTTP error or a reply that breaks the wire contract."""


class JudgeBudgetError(JudgeError, BudgetError):
    """A remote judge call refused because the search's remote budget is spent."""


class ConsistencyError(HybridSagError):
    """Reconcile refused (mass-delete guard, lease held elsewhere) or failed."""
