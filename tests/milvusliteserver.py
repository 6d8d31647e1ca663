"""A Milvus Lite server for tests in which several processes share one Milvus.

``milvus-lite server --data-dir DIR --host 127.0.0.1 --port P`` (the ``milvus-lite`` package's
own server, always with ``--host``: its default is 0.0.0.0) serves one Lite data dir over gRPC, so
that several ``hybridsag serve`` replicas write and search one collection, as they would on a
Milvus cluster. Readiness: a ``MilvusClient`` lists collections. Stopped with SIGTERM, then
SIGKILL if it lingers.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.milvusserver import _can_list as can_list

__all__ = ["milvus_lite_server", "start_milvus_lite_server"]

START_TIMEOUT_S = 60.0


def _executable() -> str | None:
    beside = Path(sys.executable).parent / "milvus-lite"
    return str(beside) if beside.is_file() else shutil.which("milvus-lite")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_milvus_lite_server(base_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start the server on a free 127.0.0.1 port; returns the process and its URI."""
    exe = _executable()
    if exe is None:
        raise RuntimeError("the milvus-lite command is not installed (pip install milvus-lite)")
    port = _free_port()
    log = open(base_dir / "milvus-lite.log", "wb")  # noqa: SIM115 - the child keeps the fd
    proc = subprocess.Popen(
        [exe, "server", "--data-dir", str(base_dir / "data"), "--host", "127.0.0.1", "--port",
         str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not can_list(uri):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            text = (base_dir / "milvus-lite.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"milvus-lite server did not start:\n{text}")
        time.sleep(0.1)
    return proc, uri


@pytest.fixture(scope="session")
def milvus_lite_server() -> Iterator[str]:
    """The URI of a Milvus Lite server shared by the session's multi-process tests."""
    if _executable() is None:
        pytest.skip("the milvus-lite command is not installed (pip install milvus-lite)")
    base = Path(tempfile.mkdtemp(prefix="hybridsag-milvus-lite-"))
    proc, uri = start_milvus_lite_server(base)
    try:
        yield uri
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(base, ignore_errors=True)
