"""The service lock: ``<data_dir>/service.json``, held while ``hybridsag serve`` runs there.

A running service is the writer of its data dir (with the embedded Milvus Lite it is the only
process that can open the index at all), so every other command on that data dir goes through
it (``hybridsag --server URL ...``). The lock tells them so before they open anything:
:func:`refuse_if_held` raises :class:`~hybridsag.errors.ServiceHoldsDataDir`, one line naming
the service's pid and URL and the ``--server`` form to run.

The record is JSON: ``{"pid", "host", "url", "started_at", "boot", "owner"}``, where ``owner``
is the process's :func:`~hybridsag.records.owners.this_owner` id (host, pid, start time, boot id), so
that a lock left by a killed service is recognised as stale even once its pid has been given to
another process or the host has rebooted (:func:`~hybridsag.records.owners.owner_dead`). A record whose
owner is dead is stale: :func:`read_service_lock` ignores it and :func:`hold_service_lock`
replaces it. A record of another host counts as live (it cannot be judged from here). A file
that is not a record of this shape (not JSON, a planted FIFO or link, over
:data:`MAX_LOCK_BYTES`) is not a lock: it is ignored and replaced, never followed or blocked on.

:func:`hold_service_lock` writes the record once the service's socket is bound and removes it on
shutdown (only while the record is still its own). Creating it is atomic and exclusive (a
temporary file linked into place, which fails when the name exists), so of two services
starting on one data dir one holds it and the other is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hybridsag.errors import ConfigError, ServiceHoldsDataDir
from hybridsag.records.owners import owner_dead, this_owner

__all__ = [
    "LOCK_NAME",
    "MAX_LOCK_BYTES",
    "ServiceLock",
    "hold_service_lock",
    "holder",
    "lock_path",
    "read_service_lock",
    "refuse_if_held",
    "service_url",
]

#: The lock's file name under the data dir.
LOCK_NAME = "service.json"
#: A lock record is a few hundred bytes; a larger file is not one.
MAX_LOCK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class ServiceLock:
    """A live service's record: its ``pid`` and ``host``, the ``url`` it answers on, when it
    started (ISO 8601, UTC), the host's ``boot`` id and the process's ``owner`` id."""

    pid: int
    host: str
    url: str
    started_at: str
    boot: str
    owner: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def refusal(self, data_dir: Path) -> ServiceHoldsDataDir:
        """The error for a command that would open ``data_dir``'s index while this holds it."""
        return ServiceHoldsDataDir(data_dir, self.pid, self.url)


def lock_path(data_dir: Path) -> Path:
    """Where the lock of ``data_dir`` lives."""
    return Path(data_dir) / LOCK_NAME


def service_url(sock: socket.socket) -> str:
    """The URL a local client reaches a service listening on ``sock`` at: an address bound to
    every interface (``0.0.0.0``, ``::``) is reached on the loopback address."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _parse(data: Any) -> ServiceLock | None:
    """The record in ``data`` (decoded JSON), or None when it has not the lock's shape."""
    if not isinstance(data, dict):
        return None
    try:
        lock = ServiceLock(**{f.name: data[f.name] for f in fields(ServiceLock)})
    except KeyError:
        return None
    types_ok = isinstance(lock.pid, int) and not isinstance(lock.pid, bool) and all(
        isinstance(v, str) for v in (lock.host, lock.url, lock.started_at, lock.boot, lock.owner)
    )
    return lock if types_ok and lock.pid > 0 else None


def _read_record(path: Path) -> ServiceLock | None:
    """The record at ``path`` whatever its owner's state, or None (absent, or not a lock).
    Only a regular file is opened (never a FIFO nor a link), and at most
    :data:`MAX_LOCK_BYTES` of it read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, MAX_LOCK_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) > MAX_LOCK_BYTES:
        return None
    try:
        return _parse(json.loads(raw.decode("utf-8")))
    except (UnicodeDecodeError, ValueError):
        return None


def read_service_lock(data_dir: Path) -> ServiceLock | None:
    """The live service lock of ``data_dir``, or None: absent, not a lock record, or stale (its
    owner is provably dead on this host, see the module docstring)."""
    lock = _read_record(lock_path(data_dir))
    if lock is None or owner_dead(lock.owner):
        return None
    return lock


def holder(data_dir: Path) -> ServiceLock | None:
    """The live lock of ``data_dir`` when another process holds it (a service's own process
    is not refused its own data dir), else None."""
    lock = read_service_lock(data_dir)
    return lock if lock is not None and lock.owner != this_owner() else None


def refuse_if_held(data_dir: Path) -> None:
    """Raise :class:`~hybridsag.errors.ServiceHoldsDataDir` when a live service other than
    this process holds ``data_dir`` (:func:`holder`); do nothing otherwise."""
    lock = holder(data_dir)
    if lock is not None:
        raise lock.refusal(Path(data_dir))


def _record(url: str) -> ServiceLock:
    owner = this_owner()
    return ServiceLock(
        pid=os.getpid(),
        host=socket.gethostname(),
        url=url,
        started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        boot=owner.rsplit(":", 1)[1],
        owner=owner,
    )


def _create(path: Path, lock: ServiceLock) -> bool:
    """Write ``lock`` at ``path`` if no file has that name (atomic: written to a temporary
    file, then hard-linked into place); False when the name exists."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(lock.as_dict(), fh)
            fh.write("\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


@contextlib.contextmanager
def hold_service_lock(data_dir: Path, url: str) -> Iterator[ServiceLock]:
    """Hold the service lock of ``data_dir`` for a service answering on ``url`` while the
    block runs; the record is removed on exit if it is still this process's own.

    Raises:
        ServiceHoldsDataDir: a live service already holds the data dir.
        ConfigError: the lock cannot be written (the data dir is not writable).
    """
    data_dir = Path(data_dir)
    path = lock_path(data_dir)
    lock = _record(url)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # replacing a stale record can race with another service doing so
            if _create(path, lock):
                break
            held = _read_record(path)
            if held is not None and not owner_dead(held.owner):
                raise held.refusal(data_dir)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a stale record, or a file that is not one
        else:
            held = read_service_lock(data_dir)
            if held is not None:
                raise held.refusal(data_dir)
            raise ConfigError(f"cannot take the service lock {path}: it keeps changing")
    except OSError as exc:
        raise ConfigError(f"cannot write the service lock {path}: {exc}") from None
    try:
        yield lock
    finally:
        if _read_record(path) == lock:
            with contextlib.suppress(OSError):
                path.unlink()
