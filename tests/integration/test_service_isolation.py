"""One tenant cannot stall the rest (issue 40), against a real service on 127.0.0.1.

- a folder-sync upload to convert (a DOCX) is converted outside the writer: tenant B's write
  is answered while tenant A's conversion still runs;
- a folder sync's manifest is compared with the records without the writer: it is answered
  while a write holds the writer;
- the writes of tenants take turns: B's one write is not queued behind A's backlog;
- a request that the shutdown cuts (past ``server.shutdown_timeout_s``) gets the service's JSON
  503, counted as such, not the server library's text 500.

The writer is held deterministically: a write's ``commit`` step waits on an event (the write
path's step hook), so "while the writer is held" is a fact, not a timing.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from hybridsag.records.keys import KEY_SEP
from hybridsag.search import HybridSearch
from hybridsag.service.server import build_server
from hybridsag.settings import Settings
from tests.docxsupport import slow_docx
from tests.servicesupport import ADMIN, free_socket, wait_ready
from tests.settings_support import clean_env_settings

pytestmark = pytest.mark.timeout(600)

A = "tenant-a-write-token-0123456789"
B = "tenant-b-write-token-0123456789"
TOKENS = [
    {"token": A, "role": "write", "tenant": "a", "name": "a-writer"},
    {"token": B, "role": "write", "tenant": "b", "name": "b-writer"},
]
#: generous: only tells "answered" from "waits for the writer"
WAIT_S = 60.0


def _settings(data_dir: Path, **server: Any) -> Settings:
    return clean_env_settings(
        data_dir=data_dir,
        embedding={"model": "none"},
        server={"token": ADMIN, "tokens": TOKENS, "reconciler": False, **server},
    )


class Held:
    """A step hook that stops the write of ``key`` at its commit until :attr:`release` is set,
    and records the order in which writes reach their commit."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.entered, self.release = threading.Event(), threading.Event()
        self.commits: list[str] = []

    def __call__(self, step: str, key: str) -> None:
        if step != "commit":
            return
        self.commits.append(key.replace(KEY_SEP, "/"))
        if key == self.key:
            self.entered.set()
            assert self.release.wait(WAIT_S * 4)


@contextmanager
def serving(settings: Settings, hook: Callable[[str, str], None] | None = None) -> Iterator[tuple[str, Any]]:
    """The service on a free port; yields (url, the uvicorn server) and stops it on exit."""
    hs = HybridSearch(settings, step_hook=hook)
    sock = free_socket()
    server = build_server(settings, search=hs)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        wait_ready(url)
        yield url, server
    finally:
        server.should_exit = True
        thread.join(timeout=300)
        sock.close()
        hs.close()
        assert not thread.is_alive(), "the service did not stop"


def client(url: str, token: str, timeout: float = WAIT_S) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)


def _in_background(fn: Callable[[], httpx.Response]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except httpx.HTTPError as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _in_flight(url: str, kind: str) -> float:
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30).text
    prefix = f'hybridsag_in_flight{{kind="{kind}"}} '
    line = next((x for x in text.splitlines() if x.startswith(prefix)), None)
    return float(line.removeprefix(prefix)) if line else 0.0


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def test_a_write_is_answered_while_another_tenants_upload_converts(tmp_path: Path) -> None:
    pytest.importorskip("docx")
    settings = _settings(tmp_path / "data", shutdown_timeout_s=1.0)
    data = slow_docx(3000)
    params = {"root": "/srv/a", "path": "big.docx", "sha256": hashlib.sha256(data).hexdigest()}
    with serving(settings) as (url, _), client(url, A) as ca, client(url, B) as cb:
        upload, answered = _in_background(
            lambda: ca.put(
                "/v1/sync/files", params=params, content=data,
                headers={"Content-Type": "application/octet-stream"},
            )
        )
        _wait(lambda: _in_flight(url, "conversion") >= 1 or bool(answered), "A's upload converting")
        assert not answered, answered  # still converting: B writes now
        r = cb.post("/v1/resources", json=[{"_id": "b/one", "text": "B's one write"}])
        assert r.status_code == 200 and r.json()["indexed"] == 1, r.text
        assert upload.is_alive() and not answered, "B's write waited for A's conversion"
    upload.join(WAIT_S)


def test_a_manifest_is_answered_while_the_writer_is_held(tmp_path: Path) -> None:
    hold = Held(f"a{KEY_SEP}held")
    settings = _settings(tmp_path / "data")
    manifest = {
        "root": "/srv/a",
        "files": [
            {"path": f"d/{i}.md", "size": 10, "mtime_ns": 1, "sha256": hashlib.sha256(b"%d" % i).hexdigest()}
            for i in range(2000)
        ],
    }
    with serving(settings, hold) as (url, _), client(url, A) as ca:
        writer, done = _in_background(
            lambda: ca.post("/v1/resources", json=[{"_id": "held", "text": "holds the writer"}])
        )
        try:
            assert hold.entered.wait(WAIT_S)
            r = ca.post("/v1/sync", json=manifest, timeout=30)
            assert r.status_code == 200, r.text
            assert len(r.json()["need"]) == 2000
            assert not done  # the writer was held throughout
        finally:
            hold.release.set()
            writer.join(WAIT_S)
        assert done and done[0].status_code == 200


def test_the_writes_of_tenants_take_turns(tmp_path: Path) -> None:
    hold = Held(f"a{KEY_SEP}a0")
    settings = _settings(tmp_path / "data", max_pending_writes=8)
    with serving(settings, hold) as (url, _), client(url, A) as ca, client(url, B) as cb:
        threads = []
        try:
            threads.append(_in_background(lambda: ca.post("/v1/resources", json=[{"_id": "a0", "text": "a0"}]))[0])
            assert hold.entered.wait(WAIT_S)
            for i in range(1, 5):  # A's backlog, admitted one after another
                threads.append(_in_background(
                    lambda i=i: ca.post("/v1/resources", json=[{"_id": f"a{i}", "text": f"a{i}"}])
                )[0])  # fmt: skip
                _wait(lambda i=i: _in_flight(url, "write") >= i + 1, f"a{i} admitted")
            threads.append(_in_background(lambda: cb.post("/v1/resources", json=[{"_id": "b1", "text": "b1"}]))[0])
            _wait(lambda: _in_flight(url, "write") >= 6, "b1 admitted")
        finally:
            hold.release.set()
            for t in threads:
                t.join(WAIT_S)
    order = hold.commits
    assert sorted(order) == ["a/a0", "a/a1", "a/a2", "a/a3", "a/a4", "b/b1"], order
    # B's one write waits for A's running write and at most one more of A's, not A's backlog
    assert order.index("b/b1") <= 2, order


def test_a_request_cut_by_the_shutdown_gets_the_services_503(tmp_path: Path) -> None:
    hold = Held(f"a{KEY_SEP}cut")
    settings = _settings(tmp_path / "data", shutdown_timeout_s=1.0)
    with serving(settings, hold) as (url, server), client(url, A) as ca:
        writer, done = _in_background(
            lambda: ca.post("/v1/resources", json=[{"_id": "cut", "text": "cut by the shutdown"}])
        )
        assert hold.entered.wait(WAIT_S)
        server.should_exit = True
        writer.join(WAIT_S)
        hold.release.set()
    assert done and isinstance(done[0], httpx.Response), done
    r = done[0]
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/json"
    detail = r.json()["detail"][0]
    assert detail["type"] == "shutting_down" and "server.shutdown_timeout_s" in detail["msg"]
