"""jevcompat's reference server for TypeSafe System One, ``jevcompat mock``, as a real process on
127.0.0.1, for tests.

jevcompat (a test dependency, pinned in pyproject.toml's ``test`` extra) is a third party's
numbered specification of ``POST /v1/systemone`` with a mock server that implements it exactly
and can break any one requirement on purpose (``jevcompat mock --list-faults``). Its fake model
hashes ``(state, instructions, criteria)`` into a yes-probability, so every answer is
deterministic and never depends on the question's id, its place or the other questions (unless
a ``*-leaks`` fault says otherwise).

:class:`JevcompatMock` runs ``python -m jevcompat.cli mock --host 127.0.0.1 --port 0 [--key KEY]
[--fault NAME ...]`` as a child process and reads the address it prints; :func:`reference_noul`
is the probability that mock answers for one question (its own model, ``jevcompat.mock.answer``):
what a client that reads the reply right must come back with. The mock reports the model
:data:`MOCK_MODEL` and the request id :data:`MOCK_REQUEST_ID` in every reply.

Use the ``jevcompat_mock`` fixture (import its function into a test module: ``from
tests.jevcompatmock import jevcompat_mock_fixture  # noqa: F401``): ``jevcompat_mock("nan")``
starts a mock with that fault and the key :data:`MOCK_KEY`, stopped after the test.
"""

from __future__ import annotations

import re
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from jevcompat.mock import FAULTS, MockConfig, answer

__all__ = [
    "FAULTS",
    "MOCK_KEY",
    "MOCK_MODEL",
    "MOCK_REQUEST_ID",
    "JevcompatMock",
    "jevcompat_mock_fixture",
    "reference_noul",
]

MOCK_KEY = "sk-jevcompat-mock-5e4d3c2b1a09"
#: the model name the mock reports in every reply (whatever model was asked for)
MOCK_MODEL = "jevcompat-mock-0.1"
#: the ``x-typesafe-request-id`` header of every reply
MOCK_REQUEST_ID = "req_mock"
_ADDRESS = re.compile(r"on (http://127\.0\.0\.1:\d+)/v1/systemone")
_START_TIMEOUT_S = 60.0


def reference_noul(
    state: Any,
    question: Mapping[str, Any],
    *,
    faults: frozenset[str] = frozenset(),
    qid: str = "",
    position: int = 0,
    count: int = 1,
) -> float:
    """The yes-probability the mock answers ``question`` with under ``state`` and ``faults``
    (``qid``, ``position`` and ``count`` matter only to the ``id-leaks``, ``order-leaks`` and
    ``batch-leaks`` faults)."""
    config = MockConfig(faults=faults)
    return float(answer(config, state, qid, dict(question), position, count)["noul"])


class JevcompatMock:
    """``jevcompat mock`` in a child process: ``start()`` waits for its address, ``stop()`` ends
    it. ``key=None`` runs it without authentication."""

    def __init__(self, faults: tuple[str, ...] = (), *, key: str | None = MOCK_KEY) -> None:
        unknown = sorted(set(faults) - set(FAULTS))
        if unknown:
            raise ValueError(f"not faults of jevcompat's mock: {unknown}; see FAULTS")
        self.faults = tuple(faults)
        self.key = key
        self._proc: subprocess.Popen[str] | None = None
        self._url: str | None = None

    @property
    def command(self) -> list[str]:
        args = [sys.executable, "-m", "jevcompat.cli", "mock", "--host", "127.0.0.1"]
        args += ["--port", "0"]
        if self.key is not None:
            args += ["--key", self.key]
        for fault in self.faults:
            args += ["--fault", fault]
        return args

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (use as a base_url)."""
        assert self._url is not None, "mock not started"
        return self._url

    def start(self) -> JevcompatMock:
        proc = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self._proc = proc
        assert proc.stderr is not None
        deadline = time.monotonic() + _START_TIMEOUT_S
        seen = ""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stderr, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not sel.select(timeout=deadline - time.monotonic()):
                    break
                line = proc.stderr.readline()
                if not line:  # the process ended without serving
                    break
                seen += line
                if found := _ADDRESS.search(line):
                    self._url = found.group(1)
                    return self
        self.stop()
        raise RuntimeError(f"{' '.join(self.command)} did not start: {seen.strip()!r}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()

    def __enter__(self) -> JevcompatMock:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(name="jevcompat_mock")
def jevcompat_mock_fixture() -> Iterator[Callable[..., JevcompatMock]]:
    """Starts ``jevcompat mock`` with the faults given (``key=None``: no authentication);
    every mock started is stopped after the test."""
    started: list[JevcompatMock] = []

    def start(*faults: str, key: str | None = MOCK_KEY) -> JevcompatMock:
        mock = JevcompatMock(faults, key=key).start()
        started.append(mock)
        return mock

    try:
        yield start
    finally:
        for mock in started:
            mock.stop()
