"""What differs between the store's two databases, and the SQL helpers both use: the
:class:`Backend` protocol (connections, how a write transaction and a read snapshot start, the
schema's column types, the JSON filter fragments, the database's errors), its SQLite
implementation (:class:`SqliteBackend`; PostgreSQL's is :mod:`hybridsag.records.postgres`), how
a new SQLite store file is made whole and how one is checked (:func:`check_store_file`), and
the ``IN (..)`` helpers (:func:`placeholders`, :func:`select_in`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from hybridsag.errors import CorruptStoreError, StoreError
from hybridsag.records.schema import MIGRATIONS_TABLE

__all__ = [
    "Backend",
    "SQLITE_MAGIC",
    "SqliteBackend",
    "check_store_file",
    "is_postgres_url",
    "placeholders",
    "select_in",
    "set_wal",
]

def placeholders(n: int) -> str:
    """``?,?,..`` for ``n`` parameters of an ``IN (..)`` list (``NULL`` for none, which matches
    nothing)."""
    return ",".join("?" * n) or "NULL"


def is_postgres_url(location: object) -> bool:
    """Whether ``location`` names a PostgreSQL store (``postgresql://`` or ``postgres://``)."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


@runtime_checkable
class Backend(Protocol):
    """What one database supplies to :class:`Store`; the store's SQL is shared.

    Contract: ``connect()`` returns a new connection with ``execute(sql, params)`` (``?``
    placeholders; rows readable by index and by column name), ``executemany``, ``in_transaction``
    and ``close()``, in autocommit mode (transactions are opened by the ``begin_*`` methods);
    ``errors`` are the database's exception types; ``schema(sql)`` rewrites a migration script
    into the database's column types. Failures to connect raise
    :class:`~hybridsag.errors.StoreError`.
    """

    name: str
    errors: tuple[type[BaseException], ...]

    def connect(self) -> Any: ...

    def release(self, conn: Any) -> None: ...

    def begin_write(self, conn: Any) -> None: ...

    def begin_snapshot(self, conn: Any) -> None: ...

    def schema(self, sql: str) -> str: ...

    def acl_any_sql(self, alias: str, n: int) -> str: ...

    def metadata_eq_sql(self, alias: str, key: str, value: object) -> tuple[str, list[Any]]: ...

    def is_retriable(self, exc: BaseException) -> bool: ...

    def error(self, doing: str, exc: BaseException) -> StoreError: ...

    def bytes_on_disk(self, conn: Any) -> int: ...

    def close(self) -> None: ...


class SqliteBackend:
    """SQLite in WAL mode: one file, ``BEGIN IMMEDIATE`` write transactions (the default)."""

    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)

    def __init__(self, path: Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.name = str(self.path)
        self._busy_timeout_s = busy_timeout_s
        if not check_store_file(self.path):
            _create_store_file(self.path, busy_timeout_s)

    def connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path}: {exc}") from exc
        conn.row_factory = sqlite3.Row
        try:
            # WAL is set once, when the file is made (_create_store_file); switching a
            # store of an older build here takes a lock that may be busy: then retried
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                set_wal(conn, self._busy_timeout_s)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            conn.close()
            raise _store_error(self.path, "opening", exc) from exc
        return conn

    def error(self, doing: str, exc: BaseException) -> StoreError:
        return _store_error(self.path, doing, exc)  # type: ignore[arg-type]

    def release(self, conn: Any) -> None:
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def begin_write(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def begin_snapshot(self, conn: Any) -> None:
        conn.execute("BEGIN")  # WAL: the first read fixes the snapshot

    def schema(self, sql: str) -> str:
        return sql

    @staticmethod
    def acl_any_sql(alias: str, n: int) -> str:
        return (
            f"EXISTS (SELECT 1 FROM json_each({alias}.acl) "
            f"WHERE json_each.value IN ({placeholders(n)}))"
        )

    @staticmethod
    def metadata_eq_sql(alias: str, key: str, value: object) -> tuple[str, list[Any]]:
        path = f'$."{key}"'
        if isinstance(value, bool):
            return f"json_type({alias}.metadata, ?) = ?", [path, "true" if value else "false"]
        kinds = "('text')" if isinstance(value, str) else "('integer', 'real')"
        return (
            f"json_type({alias}.metadata, ?) IN {kinds} AND json_extract({alias}.metadata, ?) = ?",
            [path, path, value],
        )

    @staticmethod
    def is_retriable(exc: BaseException) -> bool:
        text = str(exc).lower()
        return "locked" in text or "busy" in text

    def bytes_on_disk(self, conn: Any) -> int:
        return sum(_size(Path(str(self.path) + suffix)) for suffix in ("", "-wal", "-shm"))

    def close(self) -> None:
        pass


#: The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
_HEADER_BYTES = 100


def check_store_file(path: Path) -> bool:
    """Whether a store file exists at ``path``; if one does, that it looks whole.

    Cheap checks of the 100-byte SQLite header, no page is read: a zero-length file (a store
    is never empty once made), a file shorter than the header or without the SQLite magic, and
    a file shorter than the page count its header records (unless a write-ahead log that may
    hold the missing pages is beside it).

    Raises:
        CorruptStoreError: naming the file and what is wrong with it.
    """
    try:
        with open(path, "rb") as fh:
            header = fh.read(_HEADER_BYTES)
            size = os.fstat(fh.fileno()).st_size
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"cannot read the store {path}: {exc}") from exc
    advice = (
        "restore it from a backup, or move it away and index again to start a new store"
    )
    if size == 0:
        raise CorruptStoreError(
            f"the store {path} is an empty file (0 bytes), not a hybridsag store: {advice}"
        )
    if len(header) < _HEADER_BYTES or not header.startswith(SQLITE_MAGIC):
        raise CorruptStoreError(
            f"the store {path} is not an SQLite database ({size} bytes, no SQLite header): "
            f"{advice}"
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid = header[24:28] == header[92:96]  # the in-header size is current
    wal_size = _size(Path(f"{path}-wal"))
    if valid and pages * page_size > size and wal_size == 0:
        raise CorruptStoreError(
            f"the store {path} is truncated: its header records {pages} pages of {page_size} "
            f"bytes ({pages * page_size} bytes) but the file holds {size}: {advice}"
        )
    return True


def _size(path: Path) -> int:
    """The size of the file at ``path``, 0 when there is none. One stat, not an exists() and a
    stat: another process's last connection removes the write-ahead log and its index when it
    closes, between the two (a run of the suite saw the FileNotFoundError: 8 processes opening
    one new store)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _create_store_file(path: Path, busy_timeout_s: float) -> None:
    """Make a new store file at ``path``: built under a temporary name (WAL mode set, the
    migrations table made, so its header is whole) and hard-linked into place. When another
    process linked first, its file is used and this one dropped."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.new")
    try:
        conn = sqlite3.connect(tmp, timeout=busy_timeout_s, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(MIGRATIONS_TABLE)
        finally:
            conn.close()  # the last connection checkpoints and removes tmp's -wal and -shm
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made the store first
        except OSError:  # a filesystem without hard links: no other opener to race with
            os.replace(tmp, path)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot create the store {path}: {exc}") from exc
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            with contextlib.suppress(OSError):
                leftover.unlink()


def set_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> None:
    """Switch a file to WAL (a store of an older build, the A/B event log each worker of a
    service opens at once); SQLite does not wait on a busy lock for this, so it is retried
    until ``busy_timeout_s``."""
    deadline = time.monotonic() + busy_timeout_s
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _store_error(path: Path, doing: str, exc: sqlite3.Error) -> StoreError:
    """A :class:`StoreError` for ``exc``: :class:`CorruptStoreError` when SQLite found the file
    damaged or not a database, a retriable one when it was busy or locked."""
    name = getattr(exc, "sqlite_errorname", "")
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or (
        type(exc) is sqlite3.DatabaseError and "malformed" in str(exc)
    ):
        return CorruptStoreError(
            f"the store {path} is damaged ({exc}): restore it from a backup, or move it away "
            "and index again to start a new store"
        )
    busy = name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc)
    return StoreError(f"{doing} the store {path} failed: {exc}", retriable=busy)


def select_in(
    conn: Any,
    select: str,
    column: str,
    values: Iterable[Any],
    *,
    many: bool = False,
    batch: int = 500,
    params: Sequence[object] = (),
) -> dict[Any, Any]:
    """Rows of ``select`` (a statement ending in its FROM/JOIN/WHERE part, with no ``WHERE``
    or with a ``WHERE ... AND`` left open) whose ``column`` is one of ``values``, keyed by the
    row's first column; with ``many`` each key maps to a list of rows. Values go in batches of
    ``batch`` parameters (SQLite's limit on bound parameters); ``params`` are bound before them
    (those of the conditions ``select`` already has)."""
    out: dict[Any, Any] = {}
    ids = list(dict.fromkeys(values))
    joiner = " " if select.rstrip().upper().endswith(("WHERE", "AND")) else " WHERE "
    for start in range(0, len(ids), batch):
        part = ids[start : start + batch]
        sql = f"{select}{joiner}{column} IN ({','.join('?' * len(part))})"
        for row in conn.execute(sql, [*params, *part]):
            if many:
                out.setdefault(row[0], []).append(row)
            else:
                out[row[0]] = row
    return out
