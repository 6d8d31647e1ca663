"""A real Milvus standalone 2.3.5 server for tests, without Docker.

The PyPI package ``milvus`` 2.3.5 (the project's ``[server]`` extra) bundles Milvus standalone and a
launcher, ``milvus-server``. :func:`start_milvus_server` runs::

    ETCD_CONFIG_PATH=<dir>/etcd.yaml milvus-server --data <dir>/data \\
        --proxy-port P1 --proxy-internal-port P2 --root-coord-port P3 ... (every port option) \\
        --extra-config proxy.ip=127.0.0.1 --extra-config rootCoord.ip=127.0.0.1 ... (every role)

with every port freshly picked free, so that several test sessions on one machine do not collide:

- the ``--*-port`` options set the gRPC ports (the launcher moves to the next free port when one is
  taken, so the real proxy port is read back from the ``milvus.yaml`` it writes);
- the embedded etcd's client and peer ports (2379/2380 by default, no launcher option) are set by
  an etcd config file named in ``ETCD_CONFIG_PATH`` (Milvus reads ``etcd.config.path`` from that
  environment variable), and it listens on 127.0.0.1 only;
- ``<role>.ip=127.0.0.1`` makes every component advertise and dial 127.0.0.1. Milvus 2.3.5 has no
  listen-address option, so its gRPC ports (and the metrics/health port the launcher picks from
  9091 up) still listen on all interfaces.

The launcher ignores SIGTERM for its child, so :meth:`MilvusServerProcess.stop` sends SIGKILL to the
whole process group (launcher and ``milvus run standalone``). Readiness: a ``MilvusClient`` can
list collections.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "MILVUS_MISSING_REASON",
    "MilvusServerProcess",
    "milvus_server",
    "milvus_server_executable",
    "start_milvus_server",
]

MILVUS_MISSING_REASON = (
    "the PyPI package `milvus` (Milvus standalone 2.3.5) is not installed; "
    "install it with: pip install 'milvus==2.3.5'  (or the project's [server] extra)"
)

# Launcher options that set a listen port (milvus-server --help, milvus 2.3.5).
PORT_OPTIONS = (
    "--proxy-port",
    "--proxy-internal-port",
    "--root-coord-port",
    "--query-coord-port",
    "--query-node-port",
    "--index-coord-port",
    "--index-node-port",
    "--data-coord-port",
    "--data-node-port",
)
# Components whose advertised address is set with --extra-config <role>.ip=... (milvus.yaml).
ROLES = ("proxy", "rootCoord", "queryCoord", "queryNode", "indexNode", "dataCoord", "dataNode")

START_TIMEOUT_S = 120.0

# milvus.yaml keys set for a fast test server (all exist in the 2.3.5 template; the launcher only
# replaces keys that are already there). Defaults: 200 ms time tick (a Strong read waits up to one
# tick), queryCoord checks every 1000 ms / pulls distribution every 500 ms (a load waits for them).
FAST_TEST_CONFIG: dict[str, str] = {
    "proxy.timeTickInterval": "20",
    "queryCoord.checkInterval": "100",
    "queryCoord.distPullInterval": "100",
}
# Keys missing from the template go through the environment: Milvus reads any config key from an
# environment variable named like it (case and ``_``/``.`` ignored). Defaults 1000 and 3000 ms;
# together with the above a new collection loads in about 1.4 s instead of 2.5 s.
FAST_TEST_ENV: dict[str, str] = {
    "QUERYCOORD_CHECKCHANNELINTERVAL": "100",
    "QUERYCOORD_CHECKSEGMENTINTERVAL": "100",
}


def milvus_server_executable() -> Path | None:
    """The ``milvus-server`` launcher of the ``milvus`` package, or None when not installed."""
    if importlib.util.find_spec("milvus") is None:
        return None
    beside = Path(sys.executable).parent / "milvus-server"
    if beside.is_file():
        return beside
    found = shutil.which("milvus-server")
    return Path(found) if found else None


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now (held open together, then released)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _proxy_port(config_file: Path) -> int | None:
    """The ``proxy.port`` the launcher wrote into its milvus.yaml (None if not written yet)."""
    try:
        text = config_file.read_text(encoding="utf-8")
    except OSError:
        return None
    section = re.search(r"^proxy:\n((?:(?:  .*|\s*)\n)*)", text, flags=re.MULTILINE)
    if not section:
        return None
    port = re.search(r"^  port: *(\d+)", section.group(1), flags=re.MULTILINE)
    return int(port.group(1)) if port else None


@dataclass
class MilvusServerProcess:
    """A running ``milvus-server``; ``uri`` is ``http://127.0.0.1:<proxy port>``."""

    uri: str
    pid: int
    base_dir: Path
    startup_s: float
    proc: subprocess.Popen[bytes]

    @property
    def log_file(self) -> Path:
        return self.base_dir / "milvus-server.log"

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the launcher's output and of Milvus' own stderr log."""
        out = []
        for path in (self.log_file, self.base_dir / "data" / "logs" / "milvus-stderr.log"):
            try:
                text = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            out.append(f"--- {path} ---")
            out.extend(text[-lines:])
        return "\n".join(out)

    def stop(self) -> None:
        """SIGKILL the launcher's process group (launcher + Milvus) and reap the launcher."""
        if self.proc.poll() is None or _group_alive(self.pid):
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    return True


def _can_list(uri: str) -> bool:
    from pymilvus import MilvusClient

    try:
        # dedicated: close() really closes it (pymilvus keeps a shared connection open, pinging,
        # after its last client closes; a milvus-lite server answers idle pings with GOAWAY)
        client = MilvusClient(uri=uri, timeout=3, dedicated=True)
    except Exception:  # noqa: BLE001 - not up yet
        return False
    try:
        client.list_collections(timeout=3)
        return True
    except Exception:  # noqa: BLE001 - not ready yet
        return False
    finally:
        client.close()


def start_milvus_server(
    base_dir: Path,
    *,
    timeout_s: float = START_TIMEOUT_S,
    extra_config: dict[str, str] | None = None,
) -> MilvusServerProcess:
    """Start ``milvus-server`` under ``base_dir`` and wait until it answers.

    ``extra_config`` (milvus.yaml dotted keys) defaults to :data:`FAST_TEST_CONFIG` plus
    :data:`FAST_TEST_ENV`; pass ``{}`` for Milvus' own defaults.

    Raises:
        RuntimeError: the launcher is missing, exited, or was not ready within ``timeout_s``
            (the message carries the log tail); the process group is killed first.
    """
    exe = milvus_server_executable()
    if exe is None:
        raise RuntimeError(MILVUS_MISSING_REASON)
    base_dir.mkdir(parents=True, exist_ok=True)
    ports = _free_ports(len(PORT_OPTIONS) + 2)
    etcd_client, etcd_peer = ports[-2], ports[-1]
    etcd_config = base_dir / "etcd.yaml"
    etcd_config.write_text(
        "name: hybridsag-test\n"
        f"listen-client-urls: http://127.0.0.1:{etcd_client}\n"
        f"advertise-client-urls: http://127.0.0.1:{etcd_client}\n"
        f"listen-peer-urls: http://127.0.0.1:{etcd_peer}\n"
        f"initial-advertise-peer-urls: http://127.0.0.1:{etcd_peer}\n"
        f"initial-cluster: hybridsag-test=http://127.0.0.1:{etcd_peer}\n",
        encoding="utf-8",
    )
    cmd = [str(exe), "--data", str(base_dir / "data"), "--etcd-port", str(etcd_client)]
    for option, port in zip(PORT_OPTIONS, ports, strict=False):
        cmd += [option, str(port)]
    for role in ROLES:
        cmd += ["--extra-config", f"{role}.ip=127.0.0.1"]
    for key, value in (FAST_TEST_CONFIG if extra_config is None else extra_config).items():
        cmd += ["--extra-config", f"{key}={value}"]
    env = dict(os.environ)
    env.update(FAST_TEST_ENV if extra_config is None else {})
    env["ETCD_CONFIG_PATH"] = str(etcd_config)
    started = time.monotonic()
    with open(base_dir / "milvus-server.log", "wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=base_dir,
            start_new_session=True,  # its own process group, killed as a whole in stop()
        )
    server = MilvusServerProcess(
        uri="", pid=proc.pid, base_dir=base_dir, startup_s=0.0, proc=proc
    )
    config_file = base_dir / "data" / "configs" / "milvus.yaml"
    try:
        while True:
            elapsed = time.monotonic() - started
            if proc.poll() is not None:
                raise RuntimeError(
                    f"milvus-server exited with code {proc.returncode} after {elapsed:.1f}s\n"
                    + server.log_tail()
                )
            if elapsed > timeout_s:
                raise RuntimeError(
                    f"milvus-server not ready after {timeout_s:.0f}s\n" + server.log_tail()
                )
            port = _proxy_port(config_file)
            if port is not None and _can_list(f"http://127.0.0.1:{port}"):
                server.uri = f"http://127.0.0.1:{port}"
                server.startup_s = time.monotonic() - started
                return server
            time.sleep(0.25)
    except BaseException:
        server.stop()
        raise


_SERVER = pytest.StashKey["MilvusServerProcess | BaseException"]()


@pytest.fixture(scope="session")
def milvus_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The URI of a Milvus standalone 2.3.5 started once per test session and killed at its end.

    Skipped only when the ``milvus`` package is not installed; a server that fails to start is an
    error. Every module that imports this fixture shares the one server (kept in the config stash).
    Tests use their own collection names and drop them.
    """
    if milvus_server_executable() is None:
        pytest.skip(MILVUS_MISSING_REASON)
    state = request.config.stash.get(_SERVER, None)
    if state is None:
        try:
            state = start_milvus_server(tmp_path_factory.mktemp("milvus-server"))
        except BaseException as exc:  # remembered so that later users fail fast, not restart
            request.config.stash[_SERVER] = exc
            raise
        request.config.stash[_SERVER] = state
        request.config.add_cleanup(state.stop)
    if isinstance(state, BaseException):
        raise RuntimeError(f"milvus-server failed to start earlier in this session: {state}")
    yield state.uri
