"""The Milvus plumbing both Milvus adapters use: the dense index (:mod:`hybridsag.vectors.index`) and
the lexical index on Milvus full-text search (:mod:`hybridsag.lexical.milvus_fulltext`).

What lives here is what is true of any collection hybridsag talks to, not of one adapter's
schema:

- expressions: every string a filter holds is written as a double-quoted literal by
  :func:`quote_literal`, so no user string can change an expression's structure;
  :func:`visibility_expression` (tenant, resource ids, ACL) and :func:`resources_expression`
  (resources named by their store keys) are pure functions that tests assert on;
- connecting: :func:`connect_milvus` opens a server (``milvus.uri``) or the data dir's Milvus
  Lite store (:func:`lite_path`), which is shared: one Lite server per path and process, counted
  by its users and released by the last (:func:`release_milvus`, :func:`release_lite`), and
  refused at once when another process holds its lock (:func:`lite_lock_holder`); for several
  processes on one data dir (the service's workers) :class:`LiteServer` runs that store as a
  ``milvus-lite server`` on 127.0.0.1 that each of them connects to by URI;
- reading every row of a collection (:func:`iterate_rows`), and which pymilvus failures are
  worth retrying (:func:`milvus_retriable`);
- the shared field names of a row's resource, tenant and ACL (:func:`add_acl_field`, the ACL
  field every hybridsag schema has), and Milvus' own limits.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from hybridsag.documents import MAX_ACL_TAG_BYTES, MAX_ACL_TAGS
from hybridsag.errors import ConfigError, DenseError, HybridSagError, InputError
from hybridsag.settings import Settings
from hybridsag.records.keys import split_key

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pymilvus import MilvusClient

__all__ = [
    "F_ACL",
    "F_RESOURCE",
    "F_TENANT",
    "LiteServer",
    "MAX_LIMIT",
    "MAX_VARCHAR_BYTES",
    "add_acl_field",
    "connect_milvus",
    "create_or_join",
    "iterate_rows",
    "lite_lock_holder",
    "lite_locked_message",
    "lite_path",
    "milvus_call",
    "milvus_retriable",
    "milvus_where",
    "quote_list",
    "quote_literal",
    "release_lite",
    "release_milvus",
    "resources_expression",
    "visibility_expression",
]

log = logging.getLogger(__name__)

#: The fields every hybridsag collection names a row's resource (its public id), tenant and ACL
#: tags by (the expressions' defaults).
F_RESOURCE, F_TENANT, F_ACL = "resource_id", "tenant", "acl"
#: Milvus' largest top-k per search (16,384, the documented Milvus limit).
MAX_LIMIT = 16_384
#: Milvus' VARCHAR limit, in bytes.
MAX_VARCHAR_BYTES = 65_535
#: How long a create that lost a race waits for the winner's collection to appear.
CREATE_RACE_WAIT_S = 10.0


def add_acl_field(schema: Any) -> None:
    """Add :data:`F_ACL`, the ACL field of every collection hybridsag makes, to a pymilvus
    collection ``schema``: an array of at most ``MAX_ACL_TAGS`` tags of at most
    ``MAX_ACL_TAG_BYTES`` bytes each (:mod:`hybridsag.documents`' bounds), empty for a public
    row. Example: ``add_acl_field(MilvusClient.create_schema())``."""
    from pymilvus import DataType

    schema.add_field(
        F_ACL,
        DataType.ARRAY,
        element_type=DataType.VARCHAR,
        max_capacity=MAX_ACL_TAGS,
        max_length=MAX_ACL_TAG_BYTES,
    )


# --------------------------------------------------------------------------------------------
# Expression building (pure functions; tests assert on their output)


def quote_literal(value: str) -> str:
    """``value`` as a double-quoted Milvus expression string literal.

    Backslash, double quote, newline, carriage return and tab are backslash-escaped; every other
    character (quotes ``'``, other control characters, any Unicode) is written as is, which both
    Milvus Lite 3.2.2 and Milvus 2.3.5 read back unchanged. (``\\uXXXX`` escapes are avoided on
    purpose: Milvus Lite 3.2.2 rejects them.)

    Example: the id ``say "hi"`` becomes the expression text ``"say \\"hi\\""``.
    """
    if not isinstance(value, str):
        raise InputError(f"a filter value must be a str, got {type(value).__name__}: {value!r}")
    escaped = (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


def quote_list(values: Sequence[str]) -> str:
    """``values`` as a Milvus expression list of :func:`quote_literal` strings.

    >>> quote_list(["notes", 'say "hi"'])
    '["notes", "say \\\\"hi\\\\""]'
    """
    return "[" + ", ".join(quote_literal(v) for v in values) + "]"


def visibility_expression(
    *,
    tenant: str | None = None,
    resource_ids: Sequence[str] | None = None,
    exclude_resource_ids: Sequence[str] = (),
    acl_any: Sequence[str] | None = None,
    resource_field: str = F_RESOURCE,
    tenant_field: str | None = F_TENANT,
    acl_field: str | None = F_ACL,
) -> str:
    """The Milvus boolean expression that lets through the rows of ``tenant`` (None: any), of
    the public ids ``resource_ids`` (None: any; empty: none), not of ``exclude_resource_ids``,
    and public or sharing a tag with ``acl_any`` (None: no ACL check); "" when nothing is
    filtered. Every string is written by :func:`quote_literal`.

    ``tenant_field`` / ``acl_field`` None means the collection has no such field; that part of the
    filter is then left to the caller's post-filter (attach mode on a collection without them).

    >>> visibility_expression(tenant="t1", exclude_resource_ids=("r9",))
    '(tenant == "t1") and (resource_id not in ["r9"])'
    """
    parts: list[str] = []
    if tenant is not None and tenant_field is not None:
        parts.append(f"{tenant_field} == {quote_literal(tenant)}")
    if resource_ids is not None:
        parts.append(f"{resource_field} in {quote_list(resource_ids)}")
    if exclude_resource_ids:
        parts.append(f"{resource_field} not in {quote_list(exclude_resource_ids)}")
    if acl_any is not None and acl_field is not None:
        public = f"array_length({acl_field}) == 0"
        if acl_any:
            parts.append(f"{public} or array_contains_any({acl_field}, {quote_list(acl_any)})")
        else:
            parts.append(public)
    return " and ".join(f"({p})" for p in parts)


def resources_expression(
    keys: Sequence[str], *, resource_field: str = F_RESOURCE, tenant_field: str | None = F_TENANT
) -> str:
    """The Milvus expression matching the rows of the resources whose store keys are ``keys``
    (:func:`~hybridsag.records.store.resource_key`): per tenant, its tenant and its public ids ("" when
    ``keys`` name nothing). ``tenant_field`` None (a team collection without one): only the
    keys of tenant ``""`` can match.

    >>> resources_expression(["notes", "acme\\x1fnotes"])
    '(tenant == "" and resource_id in ["notes"]) or (tenant == "acme" and resource_id in ["notes"])'
    """
    by_tenant: dict[str, list[str]] = {}
    for key in dict.fromkeys(keys):
        tenant, resource_id = split_key(key)
        by_tenant.setdefault(tenant, []).append(resource_id)
    if tenant_field is None:
        plain = by_tenant.get("", [])
        return f"{resource_field} in {quote_list(plain)}" if plain else ""
    return " or ".join(
        f"({tenant_field} == {quote_literal(tenant)} and {resource_field} in {quote_list(ids)})"
        for tenant, ids in by_tenant.items()
    )


def milvus_where(settings: Settings) -> str:
    """Where this configuration's Milvus is, as errors and ``doctor`` name it: ``Milvus at
    <milvus.uri>``, or ``Milvus Lite at <path>`` (:func:`lite_path`) when no URI is set, as
    :func:`connect_milvus` decides."""
    uri = settings.milvus.uri
    return f"Milvus Lite at {lite_path(settings)}" if uri is None else f"Milvus at {uri}"


def lite_path(settings: Settings) -> Path:
    """Where the Milvus Lite store lives: ``settings.milvus_lite_path`` with a ``.db`` suffix
    (pymilvus only treats a local path ending in ``.db`` as Milvus Lite)."""
    path = Path(settings.milvus_lite_path)
    return path if path.suffix == ".db" else path.with_suffix(".db")


# --------------------------------------------------------------------------------------------
# Milvus Lite sharing, connecting, reading every row, retries

# Milvus Lite 3.x runs its server inside this process and keeps it, with its data-dir lock, until
# the process exits, even after ``MilvusClient.close()``. The last client of a path to close (a
# dense or a lexical index) releases it, so that another process (a CLI run, the reconciler) can
# open the path.
_LITE_USERS: dict[str, int] = {}
_LITE_USERS_LOCK = threading.Lock()
# Opening the same Milvus Lite path from two threads at once starts two servers that race for
# its lock; opens are serialised (they are rare: one per index object), and so is the last
# user's release, which stops the path's server: an open never meets a server being stopped,
# nor a user count that a release has just taken to zero while the server still holds the lock.
_LITE_OPEN_LOCK = threading.Lock()
#: opens of a Milvus Lite path tried before its failure is raised (see connect_milvus)
_LITE_OPEN_TRIES = 3


def _lite_key(path: Path) -> str:
    return str(path.resolve())


def _lite_acquire(path: Path) -> str:
    key = _lite_key(path)
    with _LITE_USERS_LOCK:
        _LITE_USERS[key] = _LITE_USERS.get(key, 0) + 1
    return key


def release_lite(key: str) -> None:
    """Give back one use of the Milvus Lite path ``key`` (from :func:`connect_milvus`); the
    path's last user in this process stops its server, which frees the folder's lock."""
    with _LITE_OPEN_LOCK, _LITE_USERS_LOCK:
        users = _LITE_USERS.get(key, 0) - 1
        if users > 0:
            _LITE_USERS[key] = users
            return
        _LITE_USERS.pop(key, None)
        try:
            from milvus_lite.server_manager import server_manager_instance
        except ImportError:  # pragma: no cover - milvus-lite is a declared dependency
            return
        server_manager_instance.release_server(key)


#: The file Milvus Lite 3.2.2 locks (``fcntl.flock``, exclusive) inside its data folder.
_LITE_LOCK_FILE = "LOCK"


def lite_lock_holder(path: Path) -> int | None:
    """The pid of another process that holds Milvus Lite's lock on the data folder ``path``
    (0 when a process holds it but ``/proc/locks`` does not say which), else None.

    Milvus Lite takes the lock when it opens and refuses a second process; checking first
    turns what would be a logged traceback and a 25 s wait into an immediate, plain answer.
    A lock this process holds (another client of the same folder) is not "another process".
    """
    lock = path / _LITE_LOCK_FILE
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX: Milvus Lite reports it itself
        return None
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return None  # no lock file yet: nobody has opened this folder
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pid = _flock_owner(lock)
            return None if pid == os.getpid() else (pid or 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _flock_owner(lock: Path) -> int | None:
    """The pid ``/proc/locks`` names for the flock on ``lock`` (Linux), else None."""
    try:
        inode = lock.stat().st_ino
        lines = Path("/proc/locks").read_text("ascii", "replace").splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 12345 08:01:1234567 0 EOF" ("->" marks a waiter)
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[2] != "->":
            try:
                if int(fields[5].rsplit(":", 1)[1]) == inode:
                    return int(fields[4])
            except (IndexError, ValueError):
                continue
    return None


def lite_locked_message(path: Path, pid: int) -> str:
    """What to tell a person whose command finds the Milvus Lite folder locked."""
    who = f"another process (pid {pid})" if pid else "another process"
    return (
        f"{who} holds the Milvus Lite index at {path.resolve()}; Milvus Lite serves one process "
        "at a time: wait for it to finish, search through the running service (`hybridsag serve`), "
        "or run a Milvus server (`milvus-lite server --host 127.0.0.1`, then set milvus.uri) "
        "that several processes can share"
    )


class LiteServer:
    """The data dir's Milvus Lite store served by ``milvus-lite server`` on 127.0.0.1, so that
    several processes (the service's workers, :mod:`hybridsag.service.workers`) share it: Milvus
    Lite itself opens a store in one process only. :meth:`start` picks a free port, starts the
    server (its output appended to ``log_path``) and returns its URI once it accepts
    connections; :meth:`stop` stops it with SIGINT, the signal on which Milvus Lite drains its
    requests and closes the store (SIGTERM would end it without closing), then SIGKILL after
    ``timeout_s``. On Linux the server is also told to stop when the process that started it
    dies (``PR_SET_PDEATHSIG``), so a SIGKILLed service leaves no server holding the store.

    >>> server = LiteServer(lite_path(settings), log_path=Path("lite.log"))  # doctest: +SKIP
    >>> uri = server.start()   # "http://127.0.0.1:PORT"                     # doctest: +SKIP
    """

    #: How long :meth:`start` waits for the server to accept connections: it opens (and
    #: replays) the store first, seconds for a large one on a loaded machine.
    START_TIMEOUT_S = 120.0

    def __init__(self, path: Path, *, log_path: Path) -> None:
        self.path = Path(path)
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None
        self.uri: str | None = None

    def start(self, *, port: int | None = None) -> str:
        """Start the server and return its URI (``http://127.0.0.1:PORT``): on ``port`` when
        given (a restart keeps the URI its clients hold), else on a free one.

        Raises:
            DenseError: another process holds the store's lock (named), or the server exited or
                did not accept connections within :data:`START_TIMEOUT_S` (the end of its log).
        """
        holder = lite_lock_holder(self.path)
        if holder is not None:
            raise DenseError(lite_locked_message(self.path, holder), retriable=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if port is None:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("127.0.0.1", 0))
                port = int(probe.getsockname()[1])
        argv = [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(self.path),
                "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
        with open(self.log_path, "ab") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=_parent_death_signal(signal.SIGINT),
            )  # fmt: skip
        deadline = time.monotonic() + self.START_TIMEOUT_S
        while not _accepts(port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                code = self.proc.poll()
                self.stop(timeout_s=5)
                tail = self.log_path.read_text("utf-8", "replace")[-1500:]
                why = f"exited with {code}" if code is not None else (
                    f"did not accept connections within {self.START_TIMEOUT_S:g} s"
                )
                raise DenseError(
                    f"the Milvus Lite server for {self.path} (port {port}) {why}; its log "
                    f"{self.log_path} ends: {tail.strip()[-600:]}",
                    retriable=True,
                )
            time.sleep(0.05)
        self.uri = f"http://127.0.0.1:{port}"
        log.info("Milvus Lite server for %s on %s (pid %d)", self.path, self.uri, self.proc.pid)
        return self.uri

    def load_collections(self) -> list[str]:
        """Load every collection of the store into the running server, and name them: Milvus
        Lite serves a reopened store's collections released, and clients that opened them
        before (the workers, after the server was started again) do not load them again.

        Raises:
            DenseError: the server did not answer.
        """
        from pymilvus import MilvusClient

        try:
            client = MilvusClient(uri=self.uri)
            try:
                names = list(client.list_collections())
                for name in names:
                    client.load_collection(name)
            finally:
                client.close()
        except Exception as exc:  # noqa: BLE001 - pymilvus raises its own tree and grpc's
            raise DenseError(f"loading the collections of {self.path} on {self.uri} failed: {exc}") from exc
        return names

    def stop(self, *, timeout_s: float = 20.0) -> int | None:
        """Stop the server (SIGINT, then SIGKILL after ``timeout_s``); its exit code, or None
        when it was not started."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode


def _accepts(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _parent_death_signal(sig: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child get ``sig`` when its parent dies (Linux's
    ``PR_SET_PDEATHSIG``; None elsewhere). libc is loaded here, in the parent: between fork
    and exec the child only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def set_signal() -> None:
        prctl(1, sig)  # PR_SET_PDEATHSIG

    return set_signal


def connect_milvus(
    settings: Settings,
    *,
    create: bool,
    call: Callable[[str, Callable[[], Any]], Any],
    lost: Callable[[str], Exception],
) -> tuple[MilvusClient, str | None]:
    """A ``MilvusClient`` for ``settings.milvus`` (Milvus Lite under the data dir when ``uri`` is
    unset, else the server) and the Lite key to hand to :func:`release_milvus` on close (None for
    a server). ``call(action, fn)`` runs a pymilvus call and maps its errors; ``lost(what)`` is
    the error for a Lite store that should exist (``create`` false) and does not. Shared by the
    dense index and the Milvus lexical index, which open one Lite server per path and process.
    """
    try:
        from pymilvus import MilvusClient
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ConfigError("Milvus needs pymilvus (pip install pymilvus)") from exc
    cfg = settings.milvus
    if cfg.uri is not None:
        uri = cfg.uri
        token = cfg.token.get_secret_value() if cfg.token else ""
        client = call(
            "connecting", lambda: MilvusClient(uri=uri, token=token, timeout=cfg.timeout_s)
        )
        return client, None
    path = lite_path(settings)
    if not create and not path.exists():
        raise lost(f"the Milvus Lite store {path} is missing")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the Milvus Lite folder {path.parent} (data_dir): {exc}"
        ) from exc
    with _LITE_OPEN_LOCK:  # Milvus Lite starts one server per path and process
        if _lite_key(path) not in _LITE_USERS:
            holder = lite_lock_holder(path)
            if holder is not None:
                raise DenseError(lite_locked_message(path, holder), retriable=True)
        for attempt in range(_LITE_OPEN_TRIES):
            try:
                client = call(
                    "opening Milvus Lite (another process may hold its lock; for several "
                    "processes run `milvus-lite server --host 127.0.0.1` and set milvus.uri)",
                    lambda: MilvusClient(uri=str(path), timeout=cfg.timeout_s),
                )
                break
            except DenseError as exc:
                # milvus-lite starts a path's server without a lock of its own, and pymilvus
                # can ask for it from a thread that is not opening (a reconnect): two starts
                # at once leave one failed ("Open local milvus failed", the folder lock taken
                # by the other, seen once in a fresh clone's test run). The next try finds the
                # server the other start registered.
                if attempt + 1 == _LITE_OPEN_TRIES or (
                    type(exc.__cause__).__name__ != "ConnectionConfigException"
                ):
                    raise
                time.sleep(0.2 * (attempt + 1))
        return client, _lite_acquire(path)


def release_milvus(client: MilvusClient, lite_key: str | None) -> None:
    """Close a client from :func:`connect_milvus` and release its Lite server when it was the
    path's last user in this process (close errors are not raised: there is nothing to do)."""
    try:
        client.close()
    except Exception:  # noqa: BLE001 - closing must not mask what the caller is doing
        log.debug("closing a Milvus client failed", exc_info=True)
    finally:
        if lite_key is not None:
            release_lite(lite_key)


def create_or_join(
    create: Callable[[], object],
    exists: Callable[[], bool],
    lost_race: type[HybridSagError],
    *,
    wait_s: float = CREATE_RACE_WAIT_S,
) -> None:
    """Run ``create`` (a collection's); where it fails with ``lost_race`` because another process
    created the collection first, wait up to ``wait_s`` for ``exists()`` and use theirs. The
    service's workers open a fresh data dir at once: the loser gets "already exists", or Milvus
    Lite's "File exists" while the winner is still at it (``exists()`` false for a moment); a
    create that fails with the collection still absent after ``wait_s`` raises its own
    error."""
    try:
        create()
    except lost_race:
        deadline = time.monotonic() + wait_s
        while not exists():
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def iterate_rows(
    client: MilvusClient,
    call: Callable[[str, Callable[[], Any]], Any],
    collection: str,
    expr: str,
    output: list[str],
    *,
    batch_size: int = 1000,
    timeout: float | None = None,
) -> Iterator[dict[str, Any]]:
    """Every row of ``collection`` matching ``expr`` (``output`` fields and the primary key),
    read with Strong consistency through ``query_iterator`` in batches; ``call`` maps errors."""
    iterator = call(
        "query_iterator",
        lambda: client.query_iterator(
            collection,
            batch_size=batch_size,
            filter=expr,
            output_fields=output,
            consistency_level="Strong",
            timeout=timeout,
        ),
    )
    try:
        while True:
            batch = call("query_iterator.next", iterator.next)
            if not batch:
                return
            yield from batch
    finally:
        try:
            iterator.close()
        except Exception:  # noqa: BLE001 - closing a finished iterator must not mask errors
            pass


_RETRIABLE_GRPC = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED"}
_CONNECT_FAILED = 2  # pymilvus Status.CONNECT_FAILED
_RATE_LIMIT = 8  # pymilvus ErrorCode.RATE_LIMIT


_T = TypeVar("_T")


def milvus_call(
    fn: Callable[[], _T],
    *,
    ours: tuple[type[HybridSagError], ...],
    error: Callable[[str, bool], HybridSagError],
) -> _T:
    """``fn()``, with anything pymilvus raises mapped to ``error(message, retriable)`` (the
    adapter's error, naming its collection); the adapter's own errors ``ours`` pass through."""
    try:
        return fn()
    except ours:
        raise
    except Exception as exc:  # noqa: BLE001 - everything from pymilvus is mapped here
        raise error(str(exc), milvus_retriable(exc)) from exc


def milvus_retriable(exc: BaseException) -> bool:
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    try:
        from pymilvus.exceptions import (
            ConnectError,
            MilvusException,
            MilvusUnavailableException,
        )
    except ImportError:  # pragma: no cover
        return False
    if isinstance(exc, (ConnectError, MilvusUnavailableException)):
        return True
    if isinstance(exc, MilvusException):
        if exc.retriable:
            return True
        code = exc.code
        name = getattr(code, "name", None)  # a grpc.StatusCode after retries ran out
        if name in _RETRIABLE_GRPC:
            return True
        if isinstance(code, int) and code in (_CONNECT_FAILED, _RATE_LIMIT):
            return True
        text = str(exc.message).lower()
        return "deadline exceeded" in text or "timeout" in text or "unavailable" in text
    code_fn = getattr(exc, "code", None)  # a raw grpc.RpcError
    if callable(code_fn):
        try:
            return getattr(code_fn(), "name", None) in _RETRIABLE_GRPC
        except Exception:  # noqa: BLE001
            return False
    return False
