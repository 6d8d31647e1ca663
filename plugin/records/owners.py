"""Owners of write claims: a process named so that another process can tell it is dead.

An owner id is ``host:pid:start:boot`` (:func:`this_owner`): the host name, the process id, the
process's start time in clock ticks since boot (field 22 of ``/proc/<pid>/stat``) and the first
12 hex digits of the kernel's boot id (``/proc/sys/kernel/random/boot_id``). A pid alone is not
enough to find a dead owner: once it is dead the kernel gives its pid to the next process, and
after a reboot every pid is new; the start time and the boot id tell those apart. The host name
matters where several hosts share one store (PostgreSQL): a process of another host is never
judged from this one.

:func:`owner_dead` is True only when the owner is provably gone: of this host, and from an earlier
boot, or its pid is free, a zombie, or now a process that started at another time. Anything else
(another host, an id it cannot read, a host without ``/proc`` where only the pid can be checked
and the pid is in use) counts as alive, so a claim is released early only when nobody can
still be working on it; the reconciler's timeout covers the rest.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["owner_dead", "pid_alive", "this_owner"]

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_cached: tuple[int, str] | None = None  # (pid, owner id): recomputed in a forked child


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) of process ``pid`` from ``/proc``, or None."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text("ascii", "replace")
    except OSError:
        return None
    # "pid (comm) state ppid ... starttime ...": comm may hold spaces and parentheses
    fields = data[data.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def _boot_id() -> str:
    try:
        return _BOOT_ID.read_text("ascii").strip().replace("-", "")[:12]
    except OSError:
        return ""


def this_owner() -> str:
    """This process's owner id, ``host:pid:start:boot`` (start and boot empty where the host
    has no ``/proc``). Example: ``"build-7:4242:1234567:3f2a9c81d0e4"``."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached[0] != pid:
        stat = _proc_stat(pid)
        start = stat[1] if stat is not None else ""
        _cached = (pid, f"{socket.gethostname()}:{pid}:{start}:{_boot_id()}")
    return _cached[1]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (``kill(pid, 0)``; this process counts as
    alive). A pid that exists but belongs to another user counts as alive."""
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_dead(owner: str) -> bool:
    """Whether ``owner`` (a :func:`this_owner` id) names a process of this host that no longer
    runs (see the module docstring); False for another host or an id in another form."""
    parts = owner.rsplit(":", 3)
    if len(parts) != 4 or not parts[1].isdigit():
        return False
    host, pid_text, start, boot = parts
    if host != socket.gethostname():
        return False
    if boot and _boot_id() and boot != _boot_id():
        return True  # started before the last reboot
    pid = int(pid_text)
    if pid == os.getpid():
        return owner != this_owner()  # an earlier process that had this pid
    if not pid_alive(pid):
        return True
    stat = _proc_stat(pid)
    if stat is None:
        return False  # no /proc: the pid is in use, so it may be the owner
    state, now_start = stat
    return state in ("Z", "X") or (bool(start) and start != now_start)
