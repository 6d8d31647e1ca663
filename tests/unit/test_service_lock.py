"""The service lock (``<data_dir>/service.json``): held while the block runs and removed after,
one live holder at a time, a dead holder's record stale (even once its pid is reused), and a
file that is not a record never trusted nor blocked on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hybridsag.errors import InputError, ServiceHoldsDataDir
from hybridsag.records.owners import this_owner
from hybridsag.records.service_lock import (
    LOCK_NAME,
    hold_service_lock,
    holder,
    lock_path,
    read_service_lock,
    refuse_if_held,
    service_url,
)

URL = "http://127.0.0.1:8765"


def _dead_owner() -> tuple[int, str]:
    """The pid and owner id of a process that has exited."""
    code = "from hybridsag.records.owners import this_owner; import os; print(os.getpid(), this_owner())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    pid, owner = proc.stdout.split()
    return int(pid), owner


def _record(pid: int, owner: str, url: str = URL) -> str:
    return json.dumps(
        {"pid": pid, "host": socket.gethostname(), "url": url, "started_at": "2026-01-01T00:00:00+00:00",
         "boot": owner.rsplit(":", 1)[1], "owner": owner}  # fmt: skip
    )


def test_held_while_the_block_runs_then_removed(tmp_path: Path) -> None:
    assert read_service_lock(tmp_path) is None
    with hold_service_lock(tmp_path, URL) as lock:
        on_disk = json.loads(lock_path(tmp_path).read_text("utf-8"))
        assert on_disk == lock.as_dict()
        assert on_disk["pid"] == os.getpid() and on_disk["owner"] == this_owner()
        assert read_service_lock(tmp_path) == lock
        # the service's own process opens its index freely; a second service is refused
        assert holder(tmp_path) is None
        refuse_if_held(tmp_path)
        with pytest.raises(ServiceHoldsDataDir) as raised:
            with hold_service_lock(tmp_path, "http://127.0.0.1:9999"):
                pass  # pragma: no cover - refused before the block
        assert raised.value.url == URL  # the first holder, untouched
        assert lock_path(tmp_path).is_file()
    assert not lock_path(tmp_path).exists()


def test_another_live_process_holds_it_and_the_refusal_names_the_server_form(
    tmp_path: Path,
) -> None:
    parent = os.getppid()  # alive for the whole test: the pytest runner's parent
    stat = Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()
    owner = f"{socket.gethostname()}:{parent}:{stat[19]}:{this_owner().rsplit(':', 1)[1]}"
    lock_path(tmp_path).write_text(_record(parent, owner), "utf-8")
    held = holder(tmp_path)
    assert held is not None and held.pid == parent
    with pytest.raises(ServiceHoldsDataDir) as raised:
        refuse_if_held(tmp_path)
    error = raised.value
    assert isinstance(error, InputError)  # exit 2 in the CLI
    assert str(error) == (
        f"the data dir {tmp_path} is held by a running service (pid {parent}, {URL}); run: "
        f"hybridsag --server {URL} <command>"
    )
    assert error.with_command("index docs").endswith(f"run: hybridsag --server {URL} index docs")
    with pytest.raises(ServiceHoldsDataDir):
        with hold_service_lock(tmp_path, "http://127.0.0.1:9999"):
            pass  # pragma: no cover


def test_a_dead_holder_is_stale_even_when_its_pid_is_reused(tmp_path: Path) -> None:
    pid, owner = _dead_owner()
    lock_path(tmp_path).write_text(_record(pid, owner), "utf-8")
    assert read_service_lock(tmp_path) is None
    refuse_if_held(tmp_path)
    # the pid given to a live process (this one) with another start time: still stale
    me = this_owner().split(":")
    reused = f"{me[0]}:{me[1]}:{int(me[2]) - 1}:{me[3]}"
    lock_path(tmp_path).write_text(_record(os.getpid(), reused), "utf-8")
    assert read_service_lock(tmp_path) is None
    with hold_service_lock(tmp_path, URL) as lock:  # replaced
        assert read_service_lock(tmp_path) == lock
    assert not lock_path(tmp_path).exists()


@pytest.mark.parametrize(
    "content",
    ["", "{not json", "[1, 2]", '{"pid": "7"}', json.dumps({"pid": True, "url": URL}), "x" * 70_000],
)
def test_a_file_that_is_not_a_record_is_no_lock_and_is_replaced(tmp_path: Path, content: str) -> None:
    lock_path(tmp_path).write_text(content, "utf-8")
    assert read_service_lock(tmp_path) is None
    with hold_service_lock(tmp_path, URL) as lock:
        assert read_service_lock(tmp_path) == lock


def test_a_fifo_or_a_link_is_never_opened_nor_followed(tmp_path: Path) -> None:
    os.mkfifo(lock_path(tmp_path))  # opening it to read would block
    assert read_service_lock(tmp_path) is None
    with hold_service_lock(tmp_path, URL):
        assert lock_path(tmp_path).is_file()
    elsewhere = tmp_path / "elsewhere.json"
    pid, owner = os.getppid(), "not:an:owner:id"
    elsewhere.write_text(_record(pid, owner), "utf-8")
    lock_path(tmp_path).symlink_to(elsewhere)
    assert read_service_lock(tmp_path) is None
    with hold_service_lock(tmp_path, URL):
        assert not lock_path(tmp_path).is_symlink()
    assert elsewhere.read_text("utf-8") == _record(pid, owner)  # the link's target untouched


def test_the_url_a_local_client_uses() -> None:
    for host, want in (("127.0.0.1", "http://127.0.0.1:{}"), ("0.0.0.0", "http://127.0.0.1:{}")):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            assert service_url(sock) == want.format(sock.getsockname()[1])
    assert LOCK_NAME == "service.json"
