"""The A/B event stores' conformance suite: the SQLite file, and the log in the system of record
(``ab.event_store = "store"``) on SQLite and on PostgreSQL, keep the same contract; replicas
sharing a PostgreSQL store share one log.

Real parts: SQLite files and a PostgreSQL server from the machine's binaries (``tests/pgserver.py``;
its cases skip, saying why, where it cannot start).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hybridsag.ab.events import EventStore, SqliteEventStore, make_event_store
from hybridsag.errors import ConfigError, StoreError
from hybridsag.settings import Settings


def _settings(tmp_path: Path, store_url: str | None, event_store: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        embedding={"model": "none"},
        store={"url": store_url},
        ab={"event_store": event_store},
    )


@pytest.fixture(params=["sqlite-file", "store-sqlite", "store-postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], EventStore]]:
    """Opens the event store under test (again, after a close: the log must survive)."""
    if request.param == "sqlite-file":
        yield lambda: SqliteEventStore(tmp_path / "events.sqlite3")
        return
    url = str(request.getfixturevalue("postgres_url")) if request.param == "store-postgres" else None
    yield lambda: make_event_store(_settings(tmp_path, url, "store"))


def test_the_event_store_contract(opener: Callable[[], EventStore]) -> None:
    store = opener()
    try:
        e1 = store.append("experiment", "x", {"action": "define"})
        e2 = store.append("impression", "x", {"results": [], "note": "naïve 北京"}, query_id="q1")
        store.append("feedback", "x", {"kind": "click", "position": 1}, query_id="q1")
        store.append("experiment", "y", {"action": "define"})
        with pytest.raises(StoreError):
            store.append("impression", "x", {"results": []}, query_id="q1")
        assert e1.seq < e2.seq and store.last_seq() == 4
    finally:
        store.close()
    again = opener()
    try:
        assert [e.kind for e in again.events(experiment="x")] == ["experiment", "impression", "feedback"]
        impression = again.impression("q1")
        assert impression is not None and impression.body["note"] == "naïve 北京"
        assert again.impression("nope") is None
        assert [e.experiment for e in again.events(kind="experiment")] == ["x", "y"]
        assert [e.seq for e in again.events()] == sorted(e.seq for e in again.events())
    finally:
        again.close()


def test_the_log_refuses_updates_and_deletes_in_the_database(tmp_path: Path, store_url: str | None) -> None:
    store = make_event_store(_settings(tmp_path, store_url, "store"))
    try:
        store.append("experiment", "x", {"action": "define"})
        db = store.store  # type: ignore[attr-defined]
        for statement in ("UPDATE ab_events SET experiment = 'z'", "DELETE FROM ab_events"):
            with pytest.raises(db.errors, match="append-only"), db.atomic() as conn:
                conn.execute(statement)
        assert [e.experiment for e in store.events()] == ["x"]
    finally:
        store.close()


def test_replicas_on_one_postgres_share_one_log(tmp_path: Path, postgres_url: str) -> None:
    one = make_event_store(_settings(tmp_path / "one", postgres_url, "auto"))
    two = make_event_store(_settings(tmp_path / "two", postgres_url, "auto"))
    try:
        one.append("impression", "x", {"results": []}, query_id="q7")
        assert two.impression("q7") is not None  # the feedback may arrive at the other replica
        two.append("feedback", "x", {"kind": "click", "position": 1}, query_id="q7")
        assert [e.kind for e in one.events(experiment="x")] == ["impression", "feedback"]
        with pytest.raises(StoreError):
            two.append("impression", "x", {"results": []}, query_id="q7")
    finally:
        one.close()
        two.close()


def test_auto_keeps_a_file_beside_a_sqlite_store_and_names_are_checked(tmp_path: Path) -> None:
    store = make_event_store(_settings(tmp_path, None, "auto"))
    try:
        assert isinstance(store, SqliteEventStore)
        assert store.path == tmp_path / "data" / "events.sqlite3"
    finally:
        store.close()
    with pytest.raises(ConfigError, match="valid: auto, sqlite, store"):
        make_event_store(_settings(tmp_path, None, "mongo"))
