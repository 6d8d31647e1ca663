"""Owner ids of write claims (hybridsag.records.owners): a dead owner is told apart from a live one, from
a process that reused its pid, and from a process of another host or boot. Real processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from hybridsag.records.owners import owner_dead, pid_alive, this_owner

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")


@contextmanager
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def owner_of(pid: int) -> str:
    """The owner id process ``pid`` would write (its start time read from /proc)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        start = fh.read().rsplit(")", 1)[1].split()[19]
    host, _pid, _start, boot = this_owner().split(":")
    return f"{host}:{pid}:{start}:{boot}"


def test_this_owner_names_host_pid_start_and_boot() -> None:
    host, pid, start, boot = this_owner().split(":")
    assert host == socket.gethostname() and pid == str(os.getpid())
    assert start.isdigit() and len(boot) == 12
    assert this_owner() == owner_of(os.getpid())
    assert not owner_dead(this_owner())


def test_a_live_owner_is_alive_and_a_dead_one_dead_reaped_or_not() -> None:
    with sleeper() as proc:
        owner = owner_of(proc.pid)
        assert not owner_dead(owner)
        proc.kill()
        deadline = time.monotonic() + 30
        while state_of(proc.pid) != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        assert pid_alive(proc.pid)  # a zombie still answers kill(pid, 0)...
        assert owner_dead(owner)  # ...but holds nothing
        proc.wait()
        assert not pid_alive(proc.pid)
        assert owner_dead(owner)


def test_a_reused_pid_does_not_keep_a_dead_owner_alive() -> None:
    with sleeper() as proc:
        host, pid, start, boot = owner_of(proc.pid).split(":")
        earlier = f"{host}:{pid}:{int(start) - 1}:{boot}"  # the pid's previous holder
        assert pid_alive(proc.pid) and owner_dead(earlier)
    mine = this_owner().split(":")
    assert owner_dead(":".join([mine[0], mine[1], str(int(mine[2]) - 1), mine[3]]))


def test_another_host_or_a_bad_id_is_never_dead_an_earlier_boot_always() -> None:
    host, pid, start, boot = this_owner().split(":")
    assert not owner_dead(f"another-host:{pid}:{start}:{boot}")
    assert not owner_dead(f"another-host:999999999:1:{boot}")
    for bad in ("", "x", "host:pid:1:2", f"{host}:12:34"):
        assert not owner_dead(bad)
    assert owner_dead(f"{host}:{pid}:{start}:000000000000")
    assert owner_dead(f"{host}:{os.getppid()}:{start}:{'f' * 12}")
