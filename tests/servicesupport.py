"""A real uvicorn serving :func:`hybridsag.service.create_app` on 127.0.0.1 for tests.

:func:`running_service` binds a free port, runs uvicorn in a thread of the test process (uvicorn
installs no signal handlers off the main thread), waits for ``/readyz``, yields the base URL and
stops the server (graceful shutdown, lifespan close) on exit. :func:`service_process` starts
``tests/service_child.py`` in a process of its own, for SIGTERM and SIGKILL.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from hybridsag.consistency.service import ServiceReconciler
from hybridsag.search import HybridSearch
from hybridsag.service.server import build_server
from hybridsag.settings import Settings

ROOT = Path(__file__).resolve().parents[1]

#: Tokens of the tests (long enough for server.tokens' minimum).
ADMIN = "admin-token-0123456789abcdef"


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def wait_ready(url: str, *, timeout_s: float = 120.0, proc: subprocess.Popen[Any] | None = None) -> dict[str, Any]:
    """Poll ``/readyz`` until 200; AssertionError naming the last answer after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the service exited with {proc.returncode} before it was ready")
        try:
            r = httpx.get(f"{url}/readyz", timeout=10)
            if r.status_code == 200:
                return r.json()
            last = r.text
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"{url} not ready after {timeout_s} s: {last}")


def folder_service_settings(data_dir: Path, folder: Path) -> Settings:
    """Lexical-only service settings (admin token :data:`ADMIN`, no reconcile job) over
    ``data_dir``, with ``folder`` indexed in-process first (as a user does before ``serve``)."""
    from tests.settings_support import clean_env_settings

    settings = clean_env_settings(
        data_dir=data_dir,
        embedding={"model": "none"},
        server={"token": ADMIN, "reconciler": False},
    )
    with HybridSearch(settings) as hs:
        report = hs.ingest_folder(folder)
        assert report.indexed and not report.errors, report.as_dict()
    return settings


@contextmanager
def running_service(
    settings: Settings, *, reconciler: bool = True, search: HybridSearch | None = None
) -> Iterator[str]:
    """Serve ``settings`` on a free 127.0.0.1 port; yields ``http://127.0.0.1:PORT``."""
    sock = free_socket()
    port = sock.getsockname()[1]
    server = build_server(
        settings, reconciler=ServiceReconciler() if reconciler else None, search=search
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=120)
        sock.close()
        assert not thread.is_alive(), "the service did not stop"


def child_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """The environment of a service process: no outer HYBRIDSAG_* plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HYBRIDSAG_")}
    env["HYBRIDSAG_DATA_DIR"] = str(data_dir)
    env["PYTHONPATH"] = str(ROOT)
    env.update(settings)
    return env


def service_process(data_dir: Path, *args: str, **settings: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``tests/service_child.py`` (the real ``serve`` path, SIGTERM handled by uvicorn)
    on a free port; returns the process and its base URL once it is ready. Its output goes to
    ``service.log`` beside the data dir. After a graceful SIGTERM shutdown uvicorn re-raises the
    signal, so the process ends with ``-SIGTERM``."""
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()  # the child binds it again (SO_REUSEADDR); nothing else races on 127.0.0.1
    env = child_env(data_dir, HYBRIDSAG_SERVER__PORT=str(port), **settings)
    with open(data_dir.parent / "service.log", "wb") as log:  # the child keeps its own fd
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "service_child.py"), *args],
            env=env,
            cwd=data_dir.parent,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc=proc)
    except AssertionError:
        proc.kill()
        proc.wait()
        raise
    return proc, url
