"""``run_bounded`` (issue 40): a call in a child process with a wall-time and a memory limit,
stopped by a cancel event, and a child that dies reported, not hung on. The functions it runs
are module-level (pickled to the child by reference)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from hybridsag.errors import IngestError, WriteCancelledError
from hybridsag.ingest.sandbox import SandboxDied, run_bounded

MIB = 1024 * 1024
#: generous: only tells "stopped" from "hung" on a loaded machine
HANG_S = 60.0


def upper(data: bytes) -> bytes:
    return data.upper()


def sleep_forever(data: bytes) -> bytes:
    time.sleep(3600)
    return data


def allocate(data: bytes) -> int:
    blocks = [bytearray(16 * MIB) for _ in range(64)]  # 1 GiB, past the limit below
    return len(blocks)


def refuse(data: bytes) -> bytes:
    raise IngestError(f"refused {len(data)} bytes")


def crash(data: bytes) -> bytes:
    os.kill(os.getpid(), signal.SIGSEGV)
    return data


def _run(fn: object, data: bytes = b"abc", **kw: object) -> object:
    options: dict[str, object] = {
        "wall_s": 30.0, "memory_bytes": 512 * MIB, "what": "test call", "setting": "formats",
    }
    options.update(kw)
    return run_bounded(fn, data, **options)  # type: ignore[arg-type]


def test_the_answer_comes_back() -> None:
    assert _run(upper, b"x" * 3 * MIB) == b"X" * 3 * MIB


def test_an_error_in_the_child_is_the_callers_with_its_message() -> None:
    with pytest.raises(IngestError, match="refused 3 bytes"):
        _run(refuse)


def test_past_the_wall_time_the_child_is_killed() -> None:
    t0 = time.monotonic()
    with pytest.raises(IngestError, match=r"ran past 0.5 s \(formats.timeout_s\)"):
        _run(sleep_forever, wall_s=0.5)
    assert time.monotonic() - t0 < HANG_S


def test_past_the_memory_limit_the_call_fails() -> None:
    with pytest.raises(IngestError, match=r"more than 256 MiB \(formats.max_memory_mb\)"):
        _run(allocate, memory_bytes=256 * MIB)


def test_a_child_that_dies_is_reported() -> None:
    with pytest.raises(SandboxDied, match="died without an answer"):
        _run(crash)


def test_cancel_stops_the_child() -> None:
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(WriteCancelledError, match="cancelled: the service is stopping"):
            _run(sleep_forever, cancel=cancel, wall_s=HANG_S * 2)
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < HANG_S


def test_calls_run_side_by_side() -> None:
    out: list[object] = []
    threads = [threading.Thread(target=lambda i=i: out.append(_run(upper, bytes([97 + i])))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    assert sorted(out) == [b"A", b"B", b"C", b"D"]  # type: ignore[type-var]


EXITING = """
import sys
sys.path[:0] = {path!r}
from hybridsag.ingest.sandbox import _SERVER, run_bounded
from tests.unit.test_sandbox import upper
assert run_bounded(upper, b"ab", wall_s=30.0, memory_bytes=512 * 2**20, what="t", setting="formats") == b"AB"
print(_SERVER._proc.pid, _SERVER._folder, flush=True)
"""


def test_a_process_that_exits_stops_its_server_and_removes_its_folder() -> None:
    """The server and its socket's folder go with the process that started them (they were
    left running until the stdin pipe closed, and the folder in the temporary directory)."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", EXITING.format(path=[root, *sys.path])],
        capture_output=True, text=True, timeout=HANG_S, cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    pid, folder = done.stdout.split()
    assert not Path(folder).exists()
    assert "ResourceWarning" not in done.stderr
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid), 0)  # reaped by its starter before it exited
