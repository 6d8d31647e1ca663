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


def test_lanes_take_turns_so_a_backlog_never_stands_before_another_lanes_call() -> None:
    """Issue 40: tenant A's backlog of writes, queued while one runs, does not stand before
    tenant B's one write: B's runs next. Each lane holds its own ``workers + queue`` places."""
    started, release = threading.Event(), threading.Event()
    order: list[str] = []
    gate = Gate("write", workers=1, queue=5, retry_after_s=1)

    def first() -> None:
        started.set()
        release.wait(30)
        order.append("a0")

    async def scenario() -> None:
        running = asyncio.ensure_future(gate.run(first, lane="a"))
        await asyncio.to_thread(started.wait, 30)
        backlog = [asyncio.ensure_future(gate.run(order.append, f"a{i}", lane="a")) for i in (1, 2, 3, 4, 5)]
        await asyncio.sleep(0)
        with pytest.raises(OverloadError, match="of yours"):  # lane a: 6 of 6 places taken
            await gate.run(order.append, "a6", lane="a")
        single = asyncio.ensure_future(gate.run(order.append, "b1", lane="b"))  # b has its own
        await asyncio.sleep(0)
        assert gate.admitted == 7
        release.set()
        await asyncio.gather(running, *backlog, single)

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        gate.close()
    assert order == ["a0", "a1", "b1", "a2", "a3", "a4", "a5"]
    assert gate.admitted == 0


def test_a_closed_gate_refuses_and_finishes_what_it_admitted() -> None:
    gate = Gate("write", workers=1, queue=2, retry_after_s=1)
    done: list[int] = []

    async def scenario() -> None:
        calls = [asyncio.ensure_future(gate.run(done.append, i, lane="a")) for i in range(3)]
        await asyncio.sleep(0)
        await asyncio.to_thread(gate.close)  # waits for the three
        await asyncio.gather(*calls)
        with pytest.raises(OverloadError, match="stopping"):
            await gate.run(done.append, 9)

    asyncio.run(scenario())
    assert done == [0, 1, 2]
