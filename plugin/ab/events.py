"""The A/B event store: an append-only log of experiment changes, impressions and feedback.

:class:`EventStore` is the extension point; :data:`EVENT_STORES` maps ``ab.event_store`` names
to factories. ``sqlite`` keeps its own file (``Settings.events_path``, by default
``<data_dir>/events.sqlite3``), apart from the system of record, in WAL mode so a report can read
while the service writes; every SQL statement it runs is in :data:`SQLITE_SQL`. ``store`` keeps
the log in the system of record (:class:`StoreEventStore`: table ``ab_events``, on SQLite or
PostgreSQL through the store's backend), so that replicas sharing a PostgreSQL store share one
log: an impression served by one replica takes the feedback sent to another. ``auto`` (the
default) is ``store`` when ``store.url`` is set and ``sqlite`` otherwise. On both, triggers
refuse ``UPDATE`` and ``DELETE``, so the log is append-only in the database itself, not only by
convention.

Events (:class:`Event`) carry a kind (``experiment``, ``impression``, ``feedback``), the
experiment's name, a query id (impressions and feedback) and a JSON body; ``seq`` orders them.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from hybridsag.errors import ConfigError, StoreError
from hybridsag.records.dialect import set_wal
from hybridsag.settings import Settings

if TYPE_CHECKING:
    from hybridsag.records.store import Store

__all__ = [
    "EVENT_STORES",
    "SQLITE_SQL",
    "Event",
    "EventKind",
    "EventStore",
    "STORE_EVENT_MIGRATIONS",
    "SqliteEventStore",
    "StoreEventStore",
    "make_event_store",
]

EventKind = Literal["experiment", "impression", "feedback"]


@dataclass(frozen=True, slots=True)
class Event:
    """One logged event; ``seq`` is its place in the log (increasing), ``at`` Unix time."""

    seq: int
    at: float
    kind: EventKind
    experiment: str
    query_id: str | None
    body: Mapping[str, Any]


@runtime_checkable
class EventStore(Protocol):
    """An append-only log of :class:`Event`.

    Contract: :meth:`append` writes one event durably (it survives a restart once it returns)
    and returns it with its ``seq``; an impression's ``query_id`` is unique (a second one
    raises :class:`~hybridsag.errors.StoreError`). Reads return events in ``seq`` order. No
    method changes or removes an event. Failures raise ``StoreError``.
    """

    def append(
        self, kind: EventKind, experiment: str, body: Mapping[str, Any], *, query_id: str | None = None
    ) -> Event: ...

    def impression(self, query_id: str) -> Event | None: ...

    def events(self, *, kind: EventKind | None = None, experiment: str | None = None) -> list[Event]: ...

    def last_seq(self) -> int: ...

    def close(self) -> None: ...


def _log_table(prefix: str, seq: str) -> str:
    """The event log's table ``{prefix}events`` and its indexes, in SQLite's types: the same
    columns in both stores, ``seq`` typed as ``seq`` says (the own file's never reuses a
    number; the system of record's is rewritten for PostgreSQL by the store's backend)."""
    return f"""
        CREATE TABLE IF NOT EXISTS {prefix}events (
            seq        {seq},
            at         REAL    NOT NULL,
            kind       TEXT    NOT NULL CHECK (kind IN ('experiment', 'impression', 'feedback')),
            experiment TEXT    NOT NULL,
            query_id   TEXT,
            body       TEXT    NOT NULL
        );
        CREATE UNIQUE INDEX IF NOT EXISTS {prefix}impression_by_query
            ON {prefix}events (query_id) WHERE kind = 'impression';
        CREATE INDEX IF NOT EXISTS {prefix}events_by_experiment ON {prefix}events (experiment, kind, seq);
        """


def _sqlite_append_only(table: str) -> str:
    """SQLite's triggers that refuse ``UPDATE`` and ``DELETE`` on ``table``, one statement a
    line (as the store's migrations split them)."""
    return "".join(
        f"    CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table} "
        "BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;\n"
        for op in ("UPDATE", "DELETE")
    )


#: How long the SQLite event store waits on a lock held by another connection or process.
BUSY_TIMEOUT_S = 30.0

#: Every statement the SQLite event store runs, by name (a PostgreSQL store mirrors these).
SQLITE_SQL: dict[str, str] = {
    "schema": _log_table("", "INTEGER PRIMARY KEY AUTOINCREMENT") + _sqlite_append_only("events"),
    "append": "INSERT INTO events (at, kind, experiment, query_id, body) VALUES (?, ?, ?, ?, ?)",
    "impression": "SELECT seq, at, kind, experiment, query_id, body FROM events "
    "WHERE kind = 'impression' AND query_id = ?",
    "events": "SELECT seq, at, kind, experiment, query_id, body FROM events "
    "WHERE (:kind IS NULL OR kind = :kind) AND (:experiment IS NULL OR experiment = :experiment) "
    "ORDER BY seq",
    "last_seq": "SELECT COALESCE(MAX(seq), 0) FROM events",
}


class SqliteEventStore:
    """:class:`EventStore` over one SQLite file (WAL; one connection per thread)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the folder of the event store {path}: {exc}") from exc
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        with self._write() as conn:
            conn.executescript(SQLITE_SQL["schema"])

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError(f"the event store {self.path} is closed")
            try:
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
                set_wal(conn, BUSY_TIMEOUT_S)
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open the event store {self.path}: {exc}") from exc
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            with conn:
                yield conn
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"event store {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"event store {self.path}: {exc}", retriable=True) from exc

    def _read(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"event store {self.path}: {exc}", retriable=True) from exc

    @staticmethod
    def _event(row: tuple[Any, ...]) -> Event:
        seq, at, kind, experiment, query_id, body = row
        return Event(int(seq), float(at), kind, experiment, query_id, json.loads(body))

    def append(
        self, kind: EventKind, experiment: str, body: Mapping[str, Any], *, query_id: str | None = None
    ) -> Event:
        at = time.time()
        text = json.dumps(body, ensure_ascii=False, sort_keys=True)
        with self._write() as conn:
            cur = conn.execute(SQLITE_SQL["append"], (at, kind, experiment, query_id, text))
            seq = int(cur.lastrowid or 0)
        return Event(seq, at, kind, experiment, query_id, json.loads(text))

    def impression(self, query_id: str) -> Event | None:
        rows = self._read(SQLITE_SQL["impression"], (query_id,))
        return self._event(rows[0]) if rows else None

    def events(
        self, *, kind: EventKind | None = None, experiment: str | None = None
    ) -> list[Event]:
        rows = self._read(SQLITE_SQL["events"], {"kind": kind, "experiment": experiment})
        return [self._event(r) for r in rows]

    def last_seq(self) -> int:
        return int(self._read(SQLITE_SQL["last_seq"], ())[0][0])

    def close(self) -> None:
        """Close every thread's connection; safe to call twice."""
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()


#: The ``ab_events`` table of :class:`StoreEventStore`, written in SQLite's types (the store's
#: backend rewrites them for PostgreSQL), then the append-only triggers of each dialect.
STORE_EVENT_MIGRATIONS: tuple[tuple[str, str], ...] = (
    ("ab_0001_events", _log_table("ab_", "INTEGER PRIMARY KEY")),
)
_APPEND_ONLY_SQLITE = ("ab_0002_append_only_sqlite", "\n" + _sqlite_append_only("ab_events"))
_APPEND_ONLY_POSTGRES = (
    "ab_0002_append_only_postgres",
    """
    CREATE OR REPLACE FUNCTION ab_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'the event log is append-only'; END $$;
    CREATE TRIGGER ab_events_no_change BEFORE UPDATE OR DELETE ON ab_events FOR EACH ROW EXECUTE FUNCTION ab_events_append_only();
    """,
)
_COLUMNS = "seq, at, kind, experiment, query_id, body"


class StoreEventStore:
    """:class:`EventStore` in the system of record (``ab_events``), on SQLite or PostgreSQL
    through :class:`~hybridsag.records.store.Store`: one log for every process and replica that shares
    the store. ``owns_store``: :meth:`close` closes ``store`` too."""

    def __init__(self, store: Store, *, owns_store: bool = False) -> None:
        self.store = store
        self._owns = owns_store
        append_only = _APPEND_ONLY_POSTGRES if store.is_postgres else _APPEND_ONLY_SQLITE
        try:
            store.migrate((*STORE_EVENT_MIGRATIONS, append_only))
        except store.errors as exc:
            raise store.backend.error("creating the A/B event table in", exc) from exc

    def _read(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        try:
            return [tuple(r) for r in self.store.connection().execute(sql, params).fetchall()]
        except self.store.errors as exc:
            raise self.store.backend.error("reading the A/B events of", exc) from exc

    def append(
        self, kind: EventKind, experiment: str, body: Mapping[str, Any], *, query_id: str | None = None
    ) -> Event:
        at = time.time()
        text = json.dumps(body, ensure_ascii=False, sort_keys=True)
        if kind == "impression" and query_id is not None and self.impression(query_id):
            raise StoreError(f"an impression of query {query_id!r} is logged already")
        try:
            with self.store.atomic() as conn:
                row = conn.execute(
                    "INSERT INTO ab_events (at, kind, experiment, query_id, body) "
                    "VALUES (?, ?, ?, ?, ?) RETURNING seq",
                    (at, kind, experiment, query_id, text),
                ).fetchone()
        except StoreError:
            raise
        except self.store.errors as exc:
            raise self.store.backend.error("logging an A/B event in", exc) from exc
        return Event(int(row[0]), at, kind, experiment, query_id, json.loads(text))

    def impression(self, query_id: str) -> Event | None:
        rows = self._read(
            f"SELECT {_COLUMNS} FROM ab_events WHERE kind = 'impression' AND query_id = ?",
            (query_id,),
        )
        return SqliteEventStore._event(rows[0]) if rows else None

    def events(
        self, *, kind: EventKind | None = None, experiment: str | None = None
    ) -> list[Event]:
        given = {k: v for k, v in (("kind", kind), ("experiment", experiment)) if v is not None}
        sql = f"SELECT {_COLUMNS} FROM ab_events"
        if given:
            sql += " WHERE " + " AND ".join(f"{column} = ?" for column in given)
        params = list(given.values())
        return [SqliteEventStore._event(r) for r in self._read(sql + " ORDER BY seq", params)]

    def last_seq(self) -> int:
        return int(self._read("SELECT COALESCE(MAX(seq), 0) FROM ab_events", ())[0][0])

    def close(self) -> None:
        if self._owns:
            self.store.close()


def _store_events(settings: Settings) -> StoreEventStore:
    """The ``store`` event store: the system of record of ``settings``, opened on its own."""
    from hybridsag.records.store import Store
    from hybridsag.lexical.tokenizer import Tokenizer

    tok = Tokenizer(
        user_dict=settings.tokenizer.user_dict, stopwords_dir=settings.tokenizer.stopwords_dir
    )
    store = Store(
        settings.store_location, tokenizer_fingerprint=tok.fingerprint(), pool_size=4
    )
    try:
        return StoreEventStore(store, owns_store=True)
    except BaseException:
        store.close()
        raise


#: ``ab.event_store`` name -> factory taking the settings.
EVENT_STORES: dict[str, Callable[[Settings], EventStore]] = {
    "sqlite": lambda s: SqliteEventStore(s.events_path),
    "store": _store_events,
}


def make_event_store(settings: Settings) -> EventStore:
    """The event store named by ``ab.event_store`` (``auto``: ``store`` when ``store.url`` is
    set, else ``sqlite``; ConfigError lists the valid names)."""
    name = settings.ab.event_store
    if name == "auto":
        name = "store" if settings.store.url is not None else "sqlite"
    try:
        factory = EVENT_STORES[name]
    except KeyError:
        raise ConfigError(
            f"unknown ab.event_store {name!r}; valid: auto, {', '.join(EVENT_STORES)}"
        ) from None
    return factory(settings)
