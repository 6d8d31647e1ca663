"""Start-up races and damaged stores.

- Several processes opening one new data dir at once: the store file is made whole under a
  temporary name and linked into place, its migrations run once in one write transaction, so no
  opener sees a half-made file, a "database is locked" from the journal-mode switch, or a
  migration applied twice.
- A damaged store (garbage, truncated, an empty file where a store was) is refused with a
  one-line error (CLI exit 2; ``doctor`` FAIL), never reset: the file is left as it was.

Real SQLite files, real child processes, the real CLI; the dense path is off.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hybridsag.cli import main
from hybridsag.errors import CorruptStoreError
from hybridsag.lexical.fts5 import FTS_MIGRATIONS
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.schema import MIGRATIONS

PROCESSES = 8
TRIALS = 12


def _open_new_data_dirs(root: str, trials: int, barrier: multiprocessing.synchronize.Barrier,
                        results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """One of the racing openers: for each trial, wait for the others, then open data dir
    ``root/<trial>`` (new) with the full composition root and read from it."""
    from hybridsag.components import Components

    for trial in range(trials):
        barrier.wait(timeout=120)
        settings = Settings(data_dir=Path(root) / str(trial), embedding={"model": "none"})
        try:
            with Components(settings) as parts:
                parts.store.counts()
                parts.lexical.doc_freqs(["x"])
            results.put("ok")
        except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
            results.put(f"{type(exc).__name__}: {exc}")


def test_processes_opening_a_new_data_dir_at_once_all_succeed(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_open_new_data_dirs, args=(str(tmp_path), TRIALS, barrier, results))
        for _ in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=300) for _ in range(PROCESSES * TRIALS)]
    for p in procs:
        p.join(timeout=60)
    failures = [o for o in outcomes if o != "ok"]
    assert failures == [], failures[:5]
    for trial in range(TRIALS):
        store = tmp_path / str(trial) / "hybridsag.sqlite3"
        conn = sqlite3.connect(store)
        try:
            names = [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name")]
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            conn.close()
        assert names == sorted(n for n, _ in MIGRATIONS + FTS_MIGRATIONS)
        assert mode == "wal"
        assert not list(store.parent.glob(".*.new*"))  # no temporary file left behind


def test_a_rollback_journal_store_switches_to_wal_while_another_connection_reads(
    tmp_path: Path,
) -> None:
    """SQLite does not wait on a busy lock for a journal-mode switch; the open must."""
    import threading

    from hybridsag.records.store import Store

    path = tmp_path / "old.sqlite3"
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    reader.execute("CREATE TABLE t(x)")  # a store made in rollback-journal mode
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM t").fetchone()  # holds a shared lock
    release = threading.Timer(0.5, lambda: reader.execute("COMMIT"))
    release.start()
    try:
        store = Store(path, tokenizer_fingerprint="fp")
    finally:
        release.join()
        reader.close()
    try:
        assert store.connection().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.get_meta("tokenizer") == "fp"
    finally:
        store.close()


def test_concurrent_first_cli_index_runs_on_a_new_data_dir(tmp_path: Path) -> None:
    """Each process creates the store if it is first (a search refuses a data dir without
    one, so the first commands on a new data dir are index runs)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hello.md").write_text("# Hello\n\nHello world, the first note.\n")
    script = Path(sys.executable).parent / "hybridsag"
    env = {
        **os.environ,
        "HYBRIDSAG_DATA_DIR": str(tmp_path / "data"),
        "HYBRIDSAG_EMBEDDING__MODEL": "none",
    }
    procs = [
        subprocess.Popen(
            [str(script), "index", str(docs), "-q"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(PROCESSES)
    ]
    outcomes = [(p.communicate(timeout=300), p.returncode) for p in procs]
    assert [code for _, code in outcomes] == [0] * PROCESSES, outcomes[0][0][1][-500:]


# -- damaged stores --------------------------------------------------------------------------


def _settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", embedding={"model": "none"})


def _made_store(tmp_path: Path) -> Path:
    """A real store with a few pages of data (closed: its WAL checkpointed and removed)."""
    settings = _settings(tmp_path)
    with HybridSearch(settings) as hs:
        for i in range(40):
            hs.ingest(f"r{i}", f"Orchard note {i}: " + "apples and pears " * 40)
    assert not Path(f"{settings.sqlite_path}-wal").exists()
    return settings.sqlite_path


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "garbage":
        path.write_bytes(os.urandom(4096))
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 3])
    elif how == "truncated header":
        path.write_bytes(data[:60])
    elif how == "zero length":
        path.write_bytes(b"")
    elif how == "garbage after the header":
        path.write_bytes(data[:100] + b"\xff" * 3000 + data[3100:])
    else:  # pragma: no cover
        raise AssertionError(how)


DAMAGE = {
    "garbage": "not an SQLite database",
    "truncated": "is truncated",
    "truncated header": "not an SQLite database",
    "zero length": "is an empty file (0 bytes)",
    "garbage after the header": "is damaged",
}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_damaged_store_is_refused_in_one_line_and_left_as_it_was(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _made_store(tmp_path)
    _damage(path, how)
    before = path.read_bytes()
    settings = _settings(tmp_path)

    with pytest.raises(CorruptStoreError, match=re.escape(DAMAGE[how])):
        HybridSearch(settings)

    out = io.StringIO()
    code = main(["--data-dir", str(settings.data_dir), "search", "apples"], out=out)
    err = capsys.readouterr().err
    assert code == 2 and out.getvalue() == ""
    assert err.count("\n") == 1 and str(path) in err and DAMAGE[how] in err, err

    out = io.StringIO()
    assert main(["--data-dir", str(settings.data_dir), "doctor"], out=out) == 1
    store_line = next(line for line in out.getvalue().splitlines() if "] store:" in line)
    assert store_line.startswith("[FAIL] store: CorruptStoreError") and DAMAGE[how] in store_line

    assert path.read_bytes() == before  # never reset, repaired or recreated
