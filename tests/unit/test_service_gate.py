"""``Gate``: a bounded thread pool that refuses with 429 instead of queueing without bound, and
stops waiting after its timeout (503) while the work still running keeps its place until done."""

from __future__ import annotations

import asyncio
import threading

import pytest

from hybridsag.errors import OverloadError
from hybridsag.service.limits import Gate, GateTimeout


def test_work_beyond_workers_and_queue_is_refused_then_admitted_again() -> None:
    started, release = threading.Event(), threading.Event()
    seen: list[int] = []
    gate = Gate("search", workers=1, queue=1, retry_after_s=3, on_change=seen.append)

    def hold() -> str:
        started.set()
        release.wait(30)
        return "held"

    async def scenario() -> None:
        first = asyncio.ensure_future(gate.run(hold))
        second = asyncio.ensure_future(gate.run(lambda: "queued"))
        await asyncio.to_thread(started.wait, 30)
        assert gate.admitted == 2
        with pytest.raises(OverloadError, match="too many search requests") as refused:
            await gate.run(lambda: "third")
        assert refused.value.retry_after_s == 3 and refused.value.retriable
        release.set()
        assert await first == "held" and await second == "queued"
        assert await gate.run(lambda: "after") == "after"

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        gate.close()
    assert gate.admitted == 0
    assert max(seen) == 2 and seen[-1] == 0


def test_a_timeout_answers_but_the_running_work_keeps_its_place() -> None:
    release = threading.Event()
    gate = Gate("search", workers=1, queue=0, retry_after_s=1)

    async def scenario() -> None:
        with pytest.raises(GateTimeout, match="within 0.05 s"):
            await gate.run(lambda: release.wait(30), timeout=0.05)
        assert gate.admitted == 1  # still running
        with pytest.raises(OverloadError):
            await gate.run(lambda: None)
        release.set()
        for _ in range(3000):
            if gate.admitted == 0:
                break
            await asyncio.sleep(0.01)
        assert await gate.run(lambda: "free again") == "free again"

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        gate.close()


def test_errors_of_the_work_reach_the_caller() -> None:
    gate = Gate("write", workers=1, queue=0, retry_after_s=1)

    def fail() -> None:
        raise ValueError("boom")

    try:
        with pytest.raises(ValueError, match="boom"):
            asyncio.run(gate.run(fail))
        assert gate.admitted == 0
    finally:
        gate.close()
