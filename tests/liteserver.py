"""A Milvus Lite gRPC server for tests where several processes share one Milvus.

``milvus-lite server --data-dir DIR --host 127.0.0.1 --port PORT`` (the CLI of the
``milvus-lite`` package, a dependency) serves a Milvus Lite data folder over gRPC, so several
processes can use one store (an embedded Milvus Lite folder admits one process). The port is
picked free on 127.0.0.1; readiness: the server logged that it listens and takes a TCP
connection.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["LiteServer", "lite_server", "start_lite_server"]

START_TIMEOUT_S = 60.0


@dataclass
class LiteServer:
    """A running ``milvus-lite server``; ``uri`` is ``http://127.0.0.1:<port>``."""

    uri: str
    data_dir: Path
    proc: subprocess.Popen[bytes]

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s) and reap it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(port: int, log_path: Path) -> bool:
    """The server logged that it listens and accepts a TCP connection. No gRPC client is made
    here: pymilvus keeps a closed client's channel in this process, and a later client of the
    same URI made after the milvus-lite server dropped it (about a minute idle) fails."""
    try:
        if "listening on" not in log_path.read_text("utf-8", errors="replace"):
            return False
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def start_lite_server(data_dir: Path, *, timeout_s: float = START_TIMEOUT_S) -> LiteServer:
    """Start ``milvus-lite server`` over ``data_dir`` on a free 127.0.0.1 port and wait until
    it answers. RuntimeError (with the log tail) when it exits or is not ready in time."""
    exe = Path(sys.executable).parent / "milvus-lite"
    port = _free_port()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"{data_dir.name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(exe), "server", "--data-dir", str(data_dir), "--host", "127.0.0.1",
             "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = LiteServer(uri=f"http://127.0.0.1:{port}", data_dir=data_dir, proc=proc)
    deadline = time.monotonic() + timeout_s
    while not _ready(port, log_path):
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            tail = log_path.read_text("utf-8", errors="replace")[-2000:]
            raise RuntimeError(f"milvus-lite server did not start on {server.uri}:\n{tail}")
        time.sleep(0.2)
    return server


@pytest.fixture
def lite_server(tmp_path: Path) -> Iterator[str]:
    """The URI of a ``milvus-lite server`` of this test alone (stopped after it)."""
    server = start_lite_server(tmp_path / "milvus-lite")
    try:
        yield server.uri
    finally:
        server.stop()
