"""The workers' board: what each worker process of a several-worker service is doing.

A service with ``server.workers`` above 1 (:mod:`hybridsag.service.workers`) runs one worker
process per slot. The board is a small array in shared memory with one state per slot
(:data:`STARTING`, :data:`READY`, :data:`FAILED`), written by the worker of that slot once it is
warm (or its warm-up failed) and by the supervising parent when it restarts a worker; every
worker reads all of it, so ``/readyz``, whichever worker answers it, is ready only when every
worker is, and names the ones that are not. Beside the states, each slot counts the
connections its worker has closed, which the parent reads to hand each new connection to the
worker with the fewest open (:mod:`hybridsag.service.workers`), and holds the heartbeat each
worker's event loop writes (:meth:`WorkerBoard.beat`, every :data:`HEARTBEAT_S`), which the
supervisor's watchdog reads: a worker whose loop stops turning is hung. A :class:`WorkerSeat`
is one worker's place: its slot, the board, and the folder prometheus-client's multiprocess
mode writes its metrics to.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FAILED", "HEARTBEAT_S", "READY", "STARTING", "WorkerBoard", "WorkerSeat"]

#: How often a worker's event loop writes its heartbeat on the board.
HEARTBEAT_S = 1.0

#: A worker is starting (spawned, or restarted after it died) and not yet warm.
STARTING = 0
#: A worker is warm (and, for the one that watches folders, their first index is applied).
READY = 1
#: A worker's warm-up failed (its log says why): it exits and the parent starts it again,
#: the slot keeping this state until the new one is spawned (STARTING).
FAILED = 2

_NAMES = {STARTING: "starting", READY: "ready", FAILED: "failed to warm up (started again)"}


class WorkerBoard:
    """One state per worker slot, in shared memory (``ctx.Array``, made before the workers
    are spawned and handed to each of them)."""

    def __init__(self, workers: int, ctx: Any) -> None:
        if workers < 1:
            raise ValueError(f"a board needs at least one worker slot, got {workers}")
        self._states = ctx.Array("b", [STARTING] * workers)
        # per slot: connections its worker has received and closed since it (re)started
        self._closed = ctx.Array("q", [0] * workers)
        #: each worker's last heartbeat (``time.monotonic()``: one clock for every process on
        #: Linux), 0.0 until its first
        self._beats = ctx.Array("d", [0.0] * workers)

    def beat(self, slot: int) -> None:
        """Worker ``slot`` is alive and its event loop turns: now is its last heartbeat."""
        self._beats[slot] = time.monotonic()

    def last_beat(self, slot: int) -> float | None:
        """When worker ``slot`` last beat (``time.monotonic()``), None before its first."""
        beat = float(self._beats[slot])
        return beat or None

    def forget_beat(self, slot: int) -> None:
        """Worker ``slot`` is starting again: no heartbeat yet."""
        self._beats[slot] = 0.0

    def __len__(self) -> int:
        return len(self._states)

    def set(self, slot: int, state: int) -> None:
        """Write ``state`` (:data:`STARTING`, :data:`READY`, :data:`FAILED`) for ``slot``."""
        if state not in _NAMES:
            raise ValueError(f"unknown worker state {state!r}; valid: {sorted(_NAMES)}")
        self._states[slot] = state

    def set_closed(self, slot: int, closed: int) -> None:
        """Write how many of the connections handed to ``slot``'s worker since it started have
        closed (the worker, as they close; the parent, 0, when it restarts the worker)."""
        self._closed[slot] = closed

    def closed(self) -> list[int]:
        """Every slot's count of closed connections (:meth:`set_closed`), slot 0 first."""
        with self._closed.get_lock():
            return list(self._closed)

    def states(self) -> list[int]:
        """Every slot's state, slot 0 first."""
        with self._states.get_lock():
            return list(self._states)

    def describe(self) -> tuple[bool, str]:
        """(every worker ready, one line): ``"2/2 workers ready"``, or with the others named,
        ``"1/2 workers ready; worker 1 starting"``."""
        states = self.states()
        ready = sum(1 for s in states if s == READY)
        line = f"{ready}/{len(states)} workers ready"
        others = [f"worker {i} {_NAMES[s]}" for i, s in enumerate(states) if s != READY]
        return ready == len(states), "; ".join([line, *others])


@dataclass(frozen=True)
class WorkerSeat:
    """One worker's place: its ``slot`` on ``board``, and the folder its metrics go to
    (prometheus-client's multiprocess mode, shared by every worker)."""

    board: WorkerBoard
    slot: int
    metrics_dir: Path

    def mark(self, state: int) -> None:
        """Write this worker's state on the board."""
        self.board.set(self.slot, state)

    def beat(self) -> None:
        """This worker is alive and its event loop turns (the supervisor's watchdog reads it)."""
        self.board.beat(self.slot)
