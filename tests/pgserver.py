"""A real PostgreSQL server for tests, from the server binaries on the machine.

:func:`start_postgres` runs ``initdb`` into a temporary directory (trust authentication, user
``hybridsag``) and ``pg_ctl start`` on 127.0.0.1 at a free port, with its Unix socket in the same
directory (no shared ``/var/run/postgresql``). The server is tuned for throwaway data (``fsync``,
``synchronous_commit`` and ``full_page_writes`` off). ``pg_ctl stop -m immediate`` and removing
the directory tear it down.

As root (PostgreSQL refuses to run as root) the binaries run as the ``postgres`` system user,
through ``runuser``, in a directory that user owns.

``postgres_server`` (session scope) is that server; ``postgres_url`` (function scope) is a fresh,
empty database on it for one test; ``store_url`` runs a test once per store backend: ``None``
(SQLite under the data dir) and a fresh PostgreSQL database. Both skip, saying why, when the binaries are missing or
psycopg (the ``postgres`` extra) is not installed.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "PostgresServer",
    "clone_database",
    "new_database",
    "postgres_bin_dir",
    "postgres_missing_reason",
    "postgres_server",
    "postgres_url",
    "start_postgres",
    "index_backends",
    "store_url",
]

START_TIMEOUT_S = 60.0
_DB_NAMES = itertools.count(1)


def postgres_bin_dir() -> Path | None:
    """The folder of ``initdb``/``pg_ctl``: on PATH, else the newest
    ``/usr/lib/postgresql/<version>/bin``; None when there is none."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    for candidate in reversed(versions):
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    return None


def postgres_missing_reason() -> str | None:
    """Why a PostgreSQL test cannot run here, or None when it can."""
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed: pip install 'hybridsag[postgres]'"
    if postgres_bin_dir() is None:
        return (
            "the PostgreSQL server binaries (initdb, pg_ctl) are neither on PATH nor under "
            "/usr/lib/postgresql/*/bin: install the postgresql package"
        )
    if os.geteuid() == 0 and (_run_as() is None):
        return (
            "running as root, and PostgreSQL refuses root: no 'postgres' user and runuser to "
            "run the server as"
        )
    return None


def _run_as() -> list[str] | None:
    """The command prefix that runs the server binaries unprivileged ([] when not root)."""
    if os.geteuid() != 0:
        return []
    import pwd

    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return None
    runuser = shutil.which("runuser")
    return [runuser, "-u", "postgres", "--"] if runuser else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    """A running server: ``url`` connects to its ``postgres`` database as ``hybridsag``."""

    base_dir: Path
    port: int
    bin_dir: Path
    startup_s: float

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://hybridsag@127.0.0.1:{self.port}/{dbname}"

    def stop(self) -> None:
        subprocess.run(
            [*(_run_as() or []), str(self.bin_dir / "pg_ctl"), "stop", "-D", str(self.base_dir / "data"), "-m",
             "immediate", "-w"],
            capture_output=True,
            timeout=60,
            check=False,
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = (self.base_dir / "server.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


def start_postgres(base_dir: Path, *, timeout_s: float = START_TIMEOUT_S) -> PostgresServer:
    """``initdb`` and start a server under ``base_dir`` on 127.0.0.1; wait until it accepts
    connections. Raises RuntimeError with the server log when it does not start."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise RuntimeError(postgres_missing_reason() or "no PostgreSQL binaries")
    data = base_dir / "data"
    prefix = _run_as() or []
    if prefix:  # root: the postgres user owns the server's directory
        shutil.chown(base_dir, user="postgres", group="postgres")
    t0 = time.monotonic()
    subprocess.run(
        [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", "hybridsag", "--auth=trust",
         "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"],
        capture_output=True,
        timeout=timeout_s,
        check=True,
    )
    port = _free_port()
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -k {base_dir} -c fsync=off "
        "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
    )
    started = subprocess.run(
        [*prefix, str(bin_dir / "pg_ctl"), "start", "-D", str(data), "-l", str(base_dir / "server.log"),
         "-o", options, "-w", "-t", str(int(timeout_s))],
        capture_output=True,
        timeout=timeout_s + 10,
        check=False,
    )
    server = PostgresServer(base_dir, port, bin_dir, time.monotonic() - t0)
    if started.returncode != 0:
        raise RuntimeError(f"PostgreSQL did not start:\n{started.stderr!r}\n{server.log_tail()}")
    return server


def new_database(server: PostgresServer) -> str:
    """Create an empty database on ``server``; return its URL."""
    import psycopg

    name = f"hs_{os.getpid()}_{next(_DB_NAMES)}"
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server.url(name)


def clone_database(server: PostgresServer, url: str) -> str:
    """A new database on ``server`` copied from the one at ``url`` (which nobody may be
    connected to); returns its URL."""
    import psycopg

    source = url.rsplit("/", 1)[1]
    name = f"hs_{os.getpid()}_{next(_DB_NAMES)}"
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
    return server.url(name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the test session (skipped, with the reason, when impossible)."""
    reason = postgres_missing_reason()
    if reason:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="hybridsag-pg-"))
    try:
        server = start_postgres(base)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database for one test."""
    return new_database(postgres_server)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    """The ``store.url`` of each store backend in turn: None (SQLite), then PostgreSQL."""
    if request.param == "sqlite":
        return None
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(params=["sqlite", "postgres", "sqlite+milvus-lexical", "sqlite+tantivy-lexical"])
def index_backends(request: pytest.FixtureRequest) -> tuple[str | None, str]:
    """``(store.url, lexical.backend)`` of each backend in turn: SQLite with FTS5, PostgreSQL
    with its tsvector rows, SQLite with the lexical index on Milvus full-text search (Milvus
    Lite under the data dir), then SQLite with the lexical index on tantivy."""
    if request.param == "sqlite":
        return None, "fts5"
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url")), "fts5"
    if request.param == "sqlite+tantivy-lexical":
        return None, "tantivy"
    return None, "milvus"
