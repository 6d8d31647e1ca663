"""Watched sources: a real service on 127.0.0.1 keeping real folders in sync from their file
events (watchfiles on inotify), lexical-only.

Each test changes files and polls what the service answers until it follows, within a generous
bound (never sleep-and-assert): an edited file is searchable in its new form, an added one is
found, a deleted one is gone; a folder changed while the service was down is caught up at
start; a burst of 500 files written, renamed and deleted as a ``git checkout`` does ends in one
consistent state (the index equals an in-process index of the final folder, and a reconcile
dry run finds nothing to do); ``serve --watch`` runs it from the command line.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hybridsag.cli import main
from hybridsag.client import ServiceClient
from hybridsag.errors import NotFoundError
from hybridsag.settings import Settings
from tests.integration.test_service_sync import in_process, snapshot
from tests.servicesupport import ADMIN, ROOT, child_env, free_socket, running_service, wait_ready

pytestmark = pytest.mark.timeout(180)

T = TypeVar("T")
#: How long a change may take to show (a generous bound: about a second is normal).
BOUND_S = 60.0


def eventually(probe: Callable[[], T | None], *, what: str, bound_s: float = BOUND_S) -> T:
    """``probe()``'s first answer that is not None or False, polled until ``bound_s``."""
    deadline = time.monotonic() + bound_s
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {bound_s} s (last: {last!r})")


def _settings(data_dir: Path, folder: Path, **sources: Any) -> Settings:
    return Settings(
        data_dir=data_dir,
        embedding={"model": "none"},
        server={"token": ADMIN, "reconciler": False, "ready_cache_s": 0},
        sources={"watch": [{"path": folder}], "debounce_ms": 100, **sources},
    )


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    shutil.copytree(ROOT / "samples" / "corpus", folder)
    return folder


@pytest.fixture
def watched(tmp_path: Path, docs: Path) -> Iterator[tuple[ServiceClient, Settings]]:
    settings = _settings(tmp_path / "data", docs)
    with running_service(settings) as url, ServiceClient(url, token=ADMIN) as c:
        eventually(lambda: len(snapshot(settings)) == 13, what="the first index of the folder")
        yield c, settings


def top(c: ServiceClient, query: str) -> str | None:
    results = c.search(query, top_k=1, paths=["bm25"])["results"]
    return results[0]["resource_id"] if results else None


def metric(c: ServiceClient, name: str) -> float:
    text = httpx.get(f"{c.url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


def test_an_edited_file_is_searchable_in_its_new_form_an_added_one_found_a_deleted_one_gone(
    watched: tuple[ServiceClient, Settings], docs: Path
) -> None:
    c, _ = watched
    assert c.ready()["checks"]["sources"].startswith("ok: watching 1 folder(s)")
    quick = docs / "guide" / "quickstart.md"
    quick.write_text("# Quickstart\n\nInstall with `pangolin-setup`.\n", encoding="utf-8")
    eventually(lambda: top(c, "pangolin-setup") == "guide/quickstart.md", what="the edit")
    chunks = c.resource("guide/quickstart.md")["chunks"]
    assert [ch["text"] for ch in chunks] == ["Install with `pangolin-setup`."]

    (docs / "guide" / "new.md").write_text("# New\n\nAbout `axolotl-mode`.\n", encoding="utf-8")
    eventually(lambda: top(c, "axolotl-mode") == "guide/new.md", what="the added file")

    (docs / "reference" / "errors.md").unlink()

    def gone() -> bool:
        try:
            c.resource("reference/errors.md")
        except NotFoundError:
            return True
        return False

    eventually(gone, what="the deleted file")
    assert metric(c, "hybridsag_watch_events_total") >= 3
    assert metric(c, "hybridsag_watch_lag_seconds_count") >= 3
    assert metric(c, "hybridsag_watch_batches_total") >= 3  # the start rescan and the events
    assert metric(c, "hybridsag_watch_queue") == 0


def test_a_change_to_gitignore_brings_a_folder_in_and_a_hidden_file_is_never_read(
    watched: tuple[ServiceClient, Settings], docs: Path
) -> None:
    c, settings = watched
    assert ("", "drafts/secret.md") not in snapshot(settings)
    (docs / ".gitignore").write_text("", encoding="utf-8")  # drafts/ is ignored no more
    eventually(lambda: ("", "drafts/secret.md") in snapshot(settings), what="the un-ignored file")
    (docs / ".hidden.md").write_text("# Hidden\n\n`narwhal`\n", encoding="utf-8")
    (docs / "after.md").write_text("# After\n\n`okapi-after`\n", encoding="utf-8")
    eventually(lambda: top(c, "okapi-after") == "after.md", what="the file written after it")
    assert top(c, "narwhal") is None


def test_changes_made_while_the_service_was_down_are_caught_up_at_start(
    tmp_path: Path, docs: Path
) -> None:
    settings = _settings(tmp_path / "data", docs)
    with running_service(settings):
        eventually(lambda: len(snapshot(settings)) == 13, what="the first index")
    (docs / "guide" / "naming.md").write_text("# Naming\n\n`wombat-name`\n", encoding="utf-8")
    (docs / "notes" / "troubleshooting.txt").unlink()
    with running_service(settings) as url, ServiceClient(url, token=ADMIN) as c:
        eventually(lambda: top(c, "wombat-name") == "guide/naming.md", what="the edit made while down")
        eventually(
            lambda: ("", "notes/troubleshooting.txt") not in snapshot(settings),
            what="the file deleted while down",
        )
    assert snapshot(settings) == in_process(tmp_path, docs)


def _checkout(folder: Path, rng: random.Random, n: int) -> None:
    """What a ``git checkout`` of another branch does to a tree of ``n`` files: most files
    rewritten (in place, or through a temporary file renamed over them), some deleted, new
    ones added, a folder renamed, lock and temp files created and removed."""
    files = sorted(folder.rglob("*.md"))
    rng.shuffle(files)
    for i, file in enumerate(files):
        roll = rng.random()
        text = f"# Page {i}\n\nBranch two text of `{file.stem}-v2` number {i}.\n"
        if roll < 0.45:
            file.write_text(text, encoding="utf-8")
        elif roll < 0.8:
            tmp = file.with_name(f".{file.name}.tmp{i}")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, file)
        elif roll < 0.9:
            file.unlink()
        if i % 50 == 0:
            lock = folder / ".git-index.lock"
            lock.write_text("lock", encoding="utf-8")
            lock.unlink()
    for j in range(n // 10):
        new = folder / f"added{j % 5}" / f"new-{j}.md"
        new.parent.mkdir(exist_ok=True)
        new.write_text(f"# New {j}\n\nAdded on branch two: `new-{j}`.\n", encoding="utf-8")
    os.rename(folder / "d3", folder / "d3-renamed")


@pytest.mark.slow
def test_a_burst_of_500_files_ends_in_one_consistent_state(tmp_path: Path) -> None:
    n = 500
    folder = tmp_path / "repo"
    for i in range(n):
        file = folder / f"d{i % 20}" / f"page-{i}.md"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(f"# Page {i}\n\nBranch one text number {i}.\n", encoding="utf-8")
    settings = _settings(tmp_path / "data", folder)
    with running_service(settings) as url, ServiceClient(url, token=ADMIN) as c:
        eventually(lambda: len(snapshot(settings)) == n, what="the first index of 500 files")
        _checkout(folder, random.Random(24), n)
        expected = in_process(tmp_path, folder)
        assert len(expected) > n // 2
        eventually(lambda: snapshot(settings) == expected, what="the index after the burst")
        plan = c.reconcile(dry_run=True)
        assert plan["ok"] is True and set(plan["counts_before"].values()) == {0}
        assert metric(c, "hybridsag_watch_queue") == 0
        batches = metric(c, "hybridsag_watch_batches_total")
    assert batches < n  # gathered into batches, not one write per file


def test_serve_watch_on_the_command_line(tmp_path: Path, docs: Path) -> None:
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    env = child_env(
        tmp_path / "data",
        HYBRIDSAG_EMBEDDING__MODEL="none",
        HYBRIDSAG_SERVER__TOKEN=ADMIN,
        HYBRIDSAG_SERVER__PORT=str(port),
        HYBRIDSAG_SERVER__RECONCILER="false",
    )
    with open(tmp_path / "serve.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hybridsag.cli", "serve", "--watch", str(docs)],
            env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc=proc)
        with ServiceClient(url, token=ADMIN) as c:
            eventually(lambda: top(c, "Quickstart") is not None, what="the first index")
            (docs / "zh" / "new.md").write_text("# N\n\n`quokka-cli`\n", encoding="utf-8")
            eventually(lambda: top(c, "quokka-cli") == "zh/new.md", what="the added file")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert f"watching {docs}" in (tmp_path / "serve.log").read_text(encoding="utf-8")


def test_serve_refuses_a_watched_folder_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRIDSAG_SERVER__TOKEN", ADMIN)
    monkeypatch.setenv("HYBRIDSAG_EMBEDDING__MODEL", "none")
    code = main(["--data-dir", str(tmp_path / "data"), "serve", "--watch", str(tmp_path / "nope")])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'nope'} does not exist or is not a folder" in err
    assert "serving" not in err
