"""Calls to remote models over HTTP: the one retry loop every remote client runs, and the meter
that counts one search's remote calls against its budget.

Every remote model client (the Jev judge, the reranker and chat judges, the HTTP embedders)
holds one :class:`Endpoint`: a URL, an injected or owned ``httpx.Client``, the retry policy of
its settings section and the error family it raises (:data:`JUDGE_ERRORS`, :data:`DENSE_ERRORS`).
:meth:`Endpoint.post` sends one JSON body and returns the 2xx reply; the caller validates it
(:meth:`Endpoint.loads`, :meth:`Endpoint.bad_reply`) and never turns a bad answer into a default.

Retry contract of :meth:`Endpoint.post`:

* 408, 429, 5xx (529 included) and transport errors (timeouts, connect/read errors) are retried
  ``max_retries`` times with exponential backoff ``backoff_s * 2**n`` (plus up to 25 % jitter),
  or exactly the wait that ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date) asks for
  (:func:`parse_retry_after`); a wait beyond ``max_retry_wait_s`` ends the retries at once
  (``retriable=True``). Other statuses raise the family's response error at once
  (``retriable=False``) naming the status, the path and the request id, with the start of the
  body; retries exhausted on timeouts raise the family's timeout error.
* The key (a ``SecretStr``) goes only into the ``Authorization: Bearer`` header and is scrubbed
  from every message built here (a server that echoes it back gets ``***``), in every form a
  server may echo it (:class:`Scrubber`: JSON- or URL-escaped, HTML entities, base64 of it or
  of the header that carried it, a head or tail of it cut off at the echo's ends), before any
  message is cut short.
* :meth:`Endpoint.stats` counts since the endpoint was built: replies accepted (``requests``,
  counted by the caller), HTTP ``attempts``, ``retries``, ``timeouts``, ``transport_errors``,
  ``http_errors`` not retried, ``invalid_replies``, ``cache_hits``, ``input_tokens``,
  ``output_tokens``.

The meter: a search opens a :class:`QueryMeter` with :func:`metered` (``HybridSearch.search``
does, with ``search.remote_budget_calls`` and ``search.remote_budget_ms``); it lives in a
context variable, so every remote call the search makes, in any thread started through
:func:`submit`, is counted there: per remote (``judge/reranker``, ``embedder/tei``, ...) the
HTTP calls, retries, milliseconds, tokens where the endpoint reports them, and answers taken
from a cache. With a budget, a call that would pass it is not made: the family's budget error
(a :class:`~hybridsag.errors.BudgetError`) is raised instead, a request in flight is cut at the
time budget, and a retry whose wait would pass it is not waited for. Outside a search (ingest)
no meter is open and nothing is limited.

Example::

    endpoint = Endpoint(remote="judge/reranker", label="reranker", setting="judge.reranker",
                        url="http://127.0.0.1:8080/rerank", model="bge", policy=settings,
                        errors=JUDGE_ERRORS, secret=None)
    with metered(QueryMeter(max_calls=4)) as meter:
        reply = endpoint.post({"query": "q", "texts": ["a"]})
    meter.usage()["judge/reranker"]["calls"]   # 1
"""

from __future__ import annotations

import contextvars
import email.utils
import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from pydantic import SecretStr

from hybridsag.scrubbing import Scrubber
from hybridsag.errors import (
    ConfigError,
    DenseBudgetError,
    DenseError,
    HybridSagError,
    JudgeBudgetError,
    JudgeError,
    JudgeResponseError,
    JudgeTimeoutError,
)

if TYPE_CHECKING:  # httpx is imported where a request is built: a search that calls no
    import httpx  # remote model (the meter alone) never loads it

__all__ = [
    "DENSE_ERRORS",
    "JUDGE_ERRORS",
    "RETRIABLE_STATUSES",
    "Aborted",
    "Endpoint",
    "ErrorFamily",
    "QueryMeter",
    "RemotePolicy",
    "Reply",
    "Scrubber",
    "by_index",
    "check_base_url",
    "check_key",
    "count_of",
    "current_meter",
    "is_number",
    "metered",
    "parse_retry_after",
    "remote_figures",
    "run_parallel",
    "submit",
    "unmetered",
]

_log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

#: statuses worth another try: request timeout, rate limit, any server error (529 = overloaded).
RETRIABLE_STATUSES: frozenset[int] = frozenset({408, 429, *range(500, 600)})

#: reply headers that may carry the server's request id, first found wins.
REQUEST_ID_HEADERS: tuple[str, ...] = ("x-request-id", "request-id")

#: what each status adds to its error message, for every endpoint.
_HINTS: Mapping[int, str] = {
    401: " (check {setting}.api_key)",
    403: " (the key may not use this model or route)",
    404: " (check {setting}.base_url and {setting}.path)",
    413: " (the request is too large for the server: lower the batch size)",
    422: " (the API refused the request body)",
}


class RemotePolicy(Protocol):
    """The retry and connection settings every remote settings section has."""

    timeout_s: float
    connect_timeout_s: float
    max_retries: int
    backoff_s: float
    max_retry_wait_s: float
    max_in_flight: int


@dataclass(frozen=True)
class ErrorFamily:
    """The errors one kind of remote client raises: ``base`` for transport failures and bad
    requests, ``timeout`` when retries end on timeouts, ``response`` for an HTTP error or a reply
    that breaks the wire contract, ``budget`` when the search's remote budget is spent."""

    base: type[HybridSagError]
    timeout: type[HybridSagError]
    response: type[HybridSagError]
    budget: type[HybridSagError]


JUDGE_ERRORS = ErrorFamily(JudgeError, JudgeTimeoutError, JudgeResponseError, JudgeBudgetError)
DENSE_ERRORS = ErrorFamily(DenseError, DenseError, DenseError, DenseBudgetError)


class Aborted(Exception):
    """Another request of the same call failed; this one stops quietly."""


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds a server asked us to wait, or None when it did not say (or said nonsense).

    ``retry-after-ms`` (milliseconds) wins over ``retry-after`` (RFC 9110: delay-seconds or an
    HTTP date; a date in the past means 0). Header names are matched case-insensitively.
    Example: ``parse_retry_after({"retry-after": "2"}) == 2.0``.
    """
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    raw_ms = lower.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms.strip())
        except ValueError:
            ms = math.nan
        if math.isfinite(ms) and ms >= 0:
            return ms / 1000.0
    raw = lower.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        now = now if now is not None else datetime.now(timezone.utc)
        return max(0.0, (when - now).total_seconds())
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


# -- the meter of one search ----------------------------------------------------------------------


class QueryMeter:
    """One search's remote calls, per remote, and its budget (see the module docstring).

    ``max_calls``: HTTP calls (retries included) the search may make in all; ``max_ms``: the
    milliseconds from the meter's start after which no remote call is made. Thread-safe.
    """

    def __init__(self, *, max_calls: int | None = None, max_ms: float | None = None) -> None:
        self.max_calls = max_calls
        self.max_ms = max_ms
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._calls = 0
        self._by: dict[str, dict[str, Any]] = {}
        #: why the budget stopped a call (the first time it did), else None
        self.spent: str | None = None

    def _entry(self, remote: str, model: str) -> dict[str, Any]:
        entry = self._by.get(remote)
        if entry is None:
            entry = self._by[remote] = {
                "model": model,
                "calls": 0,
                "retries": 0,
                "ms": 0.0,
                "input_tokens": 0,
                "output_tokens": 0,
                "cached": 0,
            }
        return entry

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self._t0) * 1000.0

    def remaining_s(self) -> float | None:
        """Seconds left of the time budget (None: no time budget; never below 0)."""
        if self.max_ms is None:
            return None
        return max(0.0, (self.max_ms - self.elapsed_ms()) / 1000.0)

    def _refuse(self, reason: str, error: type[HybridSagError]) -> NoReturn:
        if self.spent is None:
            self.spent = reason
        raise error(f"remote budget spent: {reason}")

    def admit(self, remote: str, model: str, error: type[HybridSagError]) -> float | None:
        """Count one HTTP call of ``remote``, or raise ``error`` when the budget is spent.
        Returns the seconds left of the time budget (None without one)."""
        with self._lock:
            self._entry(remote, model)
            if self.max_calls is not None and self._calls >= self.max_calls:
                self._refuse(
                    f"{self._calls} remote calls made, search.remote_budget_calls="
                    f"{self.max_calls} (next: {remote})",
                    error,
                )
            left = self.remaining_s()
            if left is not None and left <= 0:
                self._refuse(
                    f"{self.elapsed_ms():.0f} ms spent, search.remote_budget_ms={self.max_ms:g} "
                    f"(next: {remote})",
                    error,
                )
            self._calls += 1
            self._by[remote]["calls"] += 1
            return left

    def cut(self, remote: str, error: type[HybridSagError], what: str) -> NoReturn:
        """Raise ``error``: the time budget ended ``what`` (a request in flight, a retry wait)."""
        with self._lock:
            self._refuse(
                f"search.remote_budget_ms={self.max_ms:g} ended {what} of {remote}", error
            )

    def record(
        self,
        remote: str,
        model: str,
        *,
        ms: float = 0.0,
        retries: int = 0,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cached: int = 0,
    ) -> None:
        """Add what one remote did (time in its calls, retries, tokens, cache answers)."""
        with self._lock:
            entry = self._entry(remote, model)
            entry["ms"] += ms
            entry["retries"] += retries
            entry["input_tokens"] += input_tokens
            entry["output_tokens"] += output_tokens
            entry["cached"] += cached

    def usage(self) -> dict[str, dict[str, Any]]:
        """Per remote: ``model``, ``calls`` (HTTP, retries included), ``retries``, ``ms`` (wall
        time inside its calls, summed over threads), ``input_tokens`` and ``output_tokens``
        (0 where the endpoint does not say), ``cached`` (answers a cache gave instead)."""
        with self._lock:
            return {
                name: {**entry, "ms": round(entry["ms"], 3)}
                for name, entry in sorted(self._by.items())
            }

    def budget(self) -> dict[str, Any] | None:
        """The budget and what was used of it, or None when the search has none."""
        if self.max_calls is None and self.max_ms is None:
            return None
        with self._lock:
            return {
                "max_calls": self.max_calls,
                "max_ms": self.max_ms,
                "calls": self._calls,
                "elapsed_ms": round(self.elapsed_ms(), 3),
                "spent": self.spent,
            }


_CURRENT: contextvars.ContextVar[QueryMeter | None] = contextvars.ContextVar(
    "hybridsag_query_meter", default=None
)


@contextmanager
def metered(meter: QueryMeter) -> Iterator[QueryMeter]:
    """Make ``meter`` the current one for the block (remote calls in it are counted there)."""
    token = _CURRENT.set(meter)
    try:
        yield meter
    finally:
        _CURRENT.reset(token)


@contextmanager
def unmetered() -> Iterator[None]:
    """No meter for the block: a set-up call (an embedder learning its dimension) is counted
    on no search and limited by no search's budget."""
    token = _CURRENT.set(None)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_meter() -> QueryMeter | None:
    """The meter of the search this code runs for, or None (ingest, a bare judge call)."""
    return _CURRENT.get()


def submit(pool: Executor, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
    """``pool.submit(fn, ...)`` run in a copy of the caller's context, so the work it does is
    counted on the caller's meter (a thread pool does not carry context variables itself)."""
    return pool.submit(contextvars.copy_context().run, fn, *args, **kwargs)


def run_parallel(
    items: Sequence[T],
    send: Callable[[T, threading.Event], R],
    *,
    max_in_flight: int,
    thread_name: str,
) -> list[R]:
    """``send(item, abort)`` for every item, at most ``max_in_flight`` at once (a single item
    runs in the caller's thread), each in a copy of the caller's context (its search meter).
    The first failure sets ``abort`` (the others stop at their next step: :meth:`Endpoint.post`
    raises :class:`Aborted`), cancels what has not started and is raised. Returns the results
    in input order."""
    abort = threading.Event()
    if len(items) <= 1:
        return [send(item, abort) for item in items]

    def guarded(item: T) -> R:
        try:
            return send(item, abort)
        except BaseException:
            abort.set()
            raise

    results: dict[int, R] = {}
    with ThreadPoolExecutor(
        max_workers=min(max_in_flight, len(items)), thread_name_prefix=thread_name
    ) as pool:
        futures = {submit(pool, guarded, item): i for i, item in enumerate(items)}
        try:
            for future in as_completed(futures):
                try:
                    results[futures[future]] = future.result()
                except Aborted:
                    continue  # another item failed first: its error is the one raised
        except BaseException:
            abort.set()
            for future in futures:
                future.cancel()
            raise
    return [results[i] for i in range(len(items))]


def remote_figures(remote: Mapping[str, Mapping[str, Any]] | None) -> dict[str, float]:
    """A :meth:`QueryMeter.usage` flattened to numbers (``judge/reranker.calls``, ...) plus the
    totals ``remote_calls`` and ``remote_ms``: what ``hybridsag eval`` averages per query."""
    out: dict[str, float] = {}
    if not remote:
        return out
    for name, entry in remote.items():
        for key, value in entry.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[f"{name}.{key}"] = float(value)
    out["remote_calls"] = float(sum(e.get("calls", 0) for e in remote.values()))
    out["remote_ms"] = float(sum(e.get("ms", 0.0) for e in remote.values()))
    return out


# -- one endpoint --------------------------------------------------------------------------------


@dataclass
class Reply:
    """A 2xx answer of :meth:`Endpoint.post`: the response, its request id (if the server sent
    one), the HTTP attempts it took and what each retry answered (a status, ``timeout`` or
    ``transport``)."""

    response: httpx.Response
    request_id: str | None
    attempts: int
    retried: list[str] = field(default_factory=list)


class _DuplicateKeyError(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def is_number(value: Any) -> bool:
    """A JSON number (int or float), never a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def count_of(value: Any) -> bool:
    """A token count: a non-negative int, never a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def by_index(
    entries: Sequence[Any],
    n: int,
    value: Callable[[dict[str, Any], int], T],
    bad: Callable[[str], Exception],
    *,
    entry: str,
) -> dict[int, T]:
    """``{index: value(item, index)}`` over a reply's list of ``{"index": i, ...}`` objects, in
    their order, each index one of 0..n-1 and given once. Raises ``bad(problem)`` for an item
    that is not an object (``entry`` says what an item is: ``"a score entry"``), an index that
    is not a count below ``n``, an index given twice, and whatever ``value`` raises. Whether
    every index came is the caller's to check. Example: ``by_index([{"index": 0, "s": 1}], 1,
    lambda item, i: item["s"], bad, entry="an entry") == {0: 1}``."""
    out: dict[int, T] = {}
    for item in entries:
        if not isinstance(item, dict):
            raise bad(f"{entry} is {type(item).__name__}, not an object")
        index = item.get("index")
        if not count_of(index) or index >= n:
            raise bad(f"index {index!r} is not one of 0..{n - 1}")
        if index in out:
            raise bad(f"index {index} answered twice")
        out[index] = value(item, index)
    return out


def check_base_url(value: str | None, setting: str) -> str:
    """``value`` without a trailing slash, or ConfigError naming ``setting`` when it is unset or
    not an http(s) URL."""
    if value is None or not value.strip():
        raise ConfigError(f"{setting}.base_url is not set (the server's root, e.g. http://host:8080)")
    import httpx

    try:
        url = httpx.URL(value)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ConfigError(f"{setting}.base_url {value!r} is not a URL") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(f"{setting}.base_url {value!r} must be an http:// or https:// URL")
    return value.rstrip("/")


def check_key(
    secret: SecretStr | None, setting: str, *, required: bool, hint: str = ""
) -> SecretStr | None:
    """The key when it can go into an HTTP header (None when unset and not ``required``);
    ConfigError naming ``setting`` otherwise (the value is never shown; ``hint`` follows the
    message of a missing key)."""
    key = secret.get_secret_value() if secret is not None else ""
    if not key.strip():
        if required:
            raise ConfigError(f"{setting}.api_key is not set{hint}")
        return None
    if not key.isascii() or not key.isprintable() or key != key.strip():
        raise ConfigError(
            f"{setting}.api_key holds characters that cannot go in an HTTP header "
            "(whitespace, control or non-ASCII characters)"
        )
    return secret


#: How much of an error reply's body a message quotes (after the key is scrubbed from all of it).
SNIPPET_CHARS = 200
class Endpoint:
    """One remote model's URL, client, retry policy and error family (module docstring).

    ``remote`` names it in usage and metrics (``judge/reranker``); ``label`` starts its messages
    (``reranker``); ``setting`` is its settings section (``judge.reranker``), named in hints;
    ``model`` is what the meter reports. ``client``: an ``httpx.Client`` to use (its timeouts
    apply, and :meth:`close` leaves it open); without one a client is built with
    ``httpx.Timeout(timeout_s, connect=connect_timeout_s)`` and ``max_in_flight`` connections.
    """

    def __init__(
        self,
        *,
        remote: str,
        label: str,
        setting: str,
        url: str,
        model: str,
        policy: RemotePolicy,
        errors: ErrorFamily,
        secret: SecretStr | None,
        client: httpx.Client | None = None,
        user_agent: str = "hybridsag/0.1",
        request_id_headers: Sequence[str] = REQUEST_ID_HEADERS,
        hints: Mapping[int, str] | None = None,
    ) -> None:
        import httpx

        self.remote = remote
        self.label = label
        self.setting = setting
        self.url = url
        self.path = httpx.URL(url).path or "/"
        self.model = model
        self.policy = policy
        self.errors = errors
        self._secret = secret
        self._scrubber = Scrubber(secret.get_secret_value() if secret is not None else "")
        self._request_id_headers = tuple(h.lower() for h in request_id_headers)
        self._hints = {**_HINTS, **(hints or {})}
        self._owns_client = client is None
        if client is None:
            client = httpx.Client(
                timeout=httpx.Timeout(
                    policy.timeout_s, connect=min(policy.connect_timeout_s, policy.timeout_s)
                ),
                limits=httpx.Limits(
                    max_connections=policy.max_in_flight,
                    max_keepalive_connections=policy.max_in_flight,
                ),
                headers={"User-Agent": user_agent},
            )
        self.client = client
        self._stats_lock = threading.Lock()
        self._stats: dict[str, int] = dict.fromkeys(
            (
                "requests",
                "attempts",
                "retries",
                "timeouts",
                "transport_errors",
                "http_errors",
                "invalid_replies",
                "cache_hits",
                "input_tokens",
                "output_tokens",
            ),
            0,
        )

    @classmethod
    def for_section(
        cls,
        section: Any,
        *,
        remote: str,
        label: str,
        setting: str,
        default_path: str,
        model: str,
        errors: ErrorFamily,
        client: httpx.Client | None = None,
        user_agent: str = "hybridsag/0.1",
    ) -> Endpoint:
        """The endpoint of a :class:`~hybridsag.settings.RemoteSection` (``base_url`` checked,
        ``path`` or ``default_path`` appended, the optional key checked), named ``setting`` in
        messages. ConfigError for an unset or bad base URL or a key unfit for a header."""
        base = check_base_url(section.base_url, setting)
        return cls(
            remote=remote,
            label=label,
            setting=setting,
            url=base + (section.path or default_path),
            model=model,
            policy=section,
            errors=errors,
            secret=check_key(section.api_key, setting, required=False),
            client=client,
            user_agent=user_agent,
        )

    def close(self) -> None:
        """Close the HTTP client if this endpoint built it (an injected client is left open)."""
        if self._owns_client:
            self.client.close()

    def stats(self) -> dict[str, int]:
        """Totals since this endpoint was built (see the module docstring)."""
        with self._stats_lock:
            return dict(self._stats)

    def count(self, name: str, n: int = 1) -> None:
        with self._stats_lock:
            self._stats[name] += n

    def charge(self, *, input_tokens: int = 0, output_tokens: int = 0, cached: int = 0) -> None:
        """Count tokens a reply reported and answers a cache gave, here and on the meter."""
        self.count("input_tokens", input_tokens)
        self.count("output_tokens", output_tokens)
        self.count("cache_hits", cached)
        meter = current_meter()
        if meter is not None:
            meter.record(
                self.remote,
                self.model,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cached=cached,
            )

    # -- messages -------------------------------------------------------------------------------

    def scrub(self, text: str) -> str:
        """``text`` without this endpoint's key, in any form a server may echo it
        (:class:`Scrubber`)."""
        return self._scrubber(text)

    def _snippet(self, response: httpx.Response) -> str:
        """The start of an error reply's body for a message: scrubbed, then cut to
        :data:`SNIPPET_CHARS` (a cut first could split the key into a part no scrub finds)."""
        import httpx

        try:
            text = response.text
        except (UnicodeDecodeError, LookupError, httpx.HTTPError):
            return ""
        # whitespace runs collapsed (a key holds none), then a window far wider than the
        # snippet scrubbed whole (no form of a key reaches from the snippet past the window),
        # then the snippet cut from the scrubbed text
        window = " ".join(text.split())[: 16 * SNIPPET_CHARS]
        text = self.scrub(window)[:SNIPPET_CHARS]
        return f": {text}" if text else ""

    def _request_id(self, response: httpx.Response) -> str | None:
        for name in self._request_id_headers:
            value = response.headers.get(name)
            if value is not None:
                return value
        return None

    def bad_reply(self, problem: str, reply: Reply | None = None) -> HybridSagError:
        """The response error for a 2xx reply that breaks the wire contract (counted in
        ``invalid_replies``; never retried)."""
        self.count("invalid_replies")
        rid = reply.request_id if reply is not None else None
        return self.errors.response(
            self.scrub(
                f"{self.label}: reply from {self.path} (request id {rid or 'none'}) breaks the "
                f"wire contract: {problem}"
            ),
            retriable=False,
        )

    def loads(self, reply: Reply) -> Any:
        """The reply's JSON, strictly: malformed JSON, a duplicate key or a NaN/Infinity raise
        :meth:`bad_reply`."""
        try:
            return json.loads(
                reply.response.content,
                object_pairs_hook=_no_duplicate_keys,
                parse_constant=_reject_constant,
            )
        except _DuplicateKeyError as exc:
            raise self.bad_reply(f"{exc} (an id answered more than once?)", reply) from None
        except ValueError as exc:
            raise self.bad_reply(f"malformed JSON ({exc})", reply) from None

    # -- the request ----------------------------------------------------------------------------

    def post(
        self, body: Any, *, abort: threading.Event | None = None, once_within: float | None = None
    ) -> Reply:
        """POST ``body`` as JSON with the retry contract of the module docstring; the 2xx reply.
        ``once_within``: one attempt, no retry, waiting at most that many seconds (a readiness
        probe: it says how the endpoint answers now, soon).

        Raises the family's errors (``base``: transport failure after retries; ``timeout``;
        ``response``: an HTTP error; ``budget``: the search's remote budget is spent), or
        :class:`Aborted` when ``abort`` is set (another request of the same call failed).
        """
        import httpx

        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._secret is not None:
            headers["Authorization"] = f"Bearer {self._secret.get_secret_value()}"
        policy, errors, label, path = self.policy, self.errors, self.label, self.path
        max_retries = policy.max_retries if once_within is None else 0
        meter = current_meter()
        retried: list[str] = []
        attempt = 0
        while True:
            if abort is not None and abort.is_set():
                raise Aborted
            timeout: Any = httpx.USE_CLIENT_DEFAULT
            if once_within is not None:
                timeout = httpx.Timeout(
                    once_within, connect=min(policy.connect_timeout_s, once_within)
                )
            if meter is not None:
                left = meter.admit(self.remote, self.model, errors.budget)
                if left is not None and left < policy.timeout_s:
                    timeout = httpx.Timeout(left, connect=min(policy.connect_timeout_s, left))
            self.count("attempts")
            retry_after: float | None = None
            t0 = time.perf_counter()
            try:
                response = self.client.post(
                    self.url, content=content, headers=headers, timeout=timeout
                )
            except httpx.TimeoutException as exc:
                self._spent(meter, t0, attempt)
                self.count("timeouts")
                if meter is not None and meter.remaining_s() == 0:
                    meter.cut(self.remote, errors.budget, "a request in flight")
                if attempt >= max_retries:
                    raise errors.timeout(
                        f"{label}: no reply from {path} in time ({type(exc).__name__}) after "
                        f"{attempt + 1} attempt(s); "
                        + (f"{self.setting}.timeout_s={policy.timeout_s}" if once_within is None
                           else f"a probe waits {once_within:g} s"),
                        retriable=True,
                    ) from exc
                why = "timeout"
            except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                self._spent(meter, t0, attempt)
                self.count("transport_errors")
                if attempt >= max_retries:
                    raise errors.base(
                        f"{label}: {type(exc).__name__} talking to {path} after {attempt + 1} "
                        "attempt(s)",
                        retriable=True,
                    ) from exc
                why = "transport"
            except httpx.HTTPError as exc:
                self._spent(meter, t0, attempt)
                raise errors.base(f"{label}: request to {path} failed: {type(exc).__name__}") from exc
            else:
                self._spent(meter, t0, attempt)
                request_id = self._request_id(response)
                status = response.status_code
                if 200 <= status < 300:
                    return Reply(response, request_id, attempt + 1, retried)
                what = self.scrub(
                    f"{label}: HTTP {status} {response.reason_phrase} from {path} "
                    f"(request id {request_id or 'none'})"
                )
                if status not in RETRIABLE_STATUSES:
                    self.count("http_errors")
                    hint = self._hints.get(status, "").format(setting=self.setting)
                    raise errors.response(
                        f"{what}; not retried{hint}{self._snippet(response)}", retriable=False
                    )
                if attempt >= max_retries:
                    self.count("http_errors")
                    raise errors.response(
                        f"{what} after {attempt + 1} attempt(s){self._snippet(response)}",
                        retriable=True,
                    )
                retry_after = parse_retry_after(response.headers)
                if retry_after is not None and retry_after > policy.max_retry_wait_s:
                    self.count("http_errors")
                    raise errors.response(
                        f"{what}; the server asked to retry after {retry_after:g} s, beyond "
                        f"{self.setting}.max_retry_wait_s={policy.max_retry_wait_s:g}",
                        retriable=True,
                    )
                why = str(status)
            if retry_after is not None:
                delay = retry_after
            else:
                delay = policy.backoff_s * (2**attempt) * (1.0 + 0.25 * random.random())
            if meter is not None:
                left = meter.remaining_s()
                if left is not None and delay >= left:
                    meter.cut(self.remote, errors.budget, f"a {delay:.3g} s retry wait")
            retried.append(why)
            self.count("retries")
            _log.debug("%s: retry %d after %s, waiting %.3f s", label, attempt + 1, why, delay)
            if abort is not None:
                if abort.wait(delay):
                    raise Aborted
            elif delay > 0:
                time.sleep(delay)
            attempt += 1

    def _spent(self, meter: QueryMeter | None, t0: float, attempt: int) -> None:
        if meter is not None:
            meter.record(
                self.remote,
                self.model,
                ms=(time.perf_counter() - t0) * 1000.0,
                retries=1 if attempt else 0,
            )
