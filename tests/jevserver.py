"""A local HTTP server that speaks the Jev (TypeSafe System One) wire format, for tests.

It is a real server (:class:`tests.scriptedserver.ScriptedServer`: ``ThreadingHTTPServer`` in a
thread, HTTP/1.1 keep-alive) on 127.0.0.1 with an ephemeral port. It serves both routes, ``POST /v1/systemone`` and
``POST /api/alpha/decisions``, checks ``Authorization: Bearer <api_key>`` (401 otherwise, with a
body that echoes the presented header, so tests can check that the client scrubs its key), checks
the request body's shape (422 otherwise) and answers every question.

Scoring rule (deterministic, :func:`score`): the question is ``state["question"]`` (or the whole
state when it is a string); the candidate text is what lies between ``<passage>`` and
``</passage>`` in the question's instructions (the whole instructions when there are no tags).
A candidate containing ``GOLD`` (upper case) scores 0.99; any other scores
``0.9 * share``, where ``share`` is the fraction of the question's distinct lowercase words
(``[a-z0-9]+``, length >= 3) that occur as words in the candidate text, rounded to 2 decimals.
So GOLD ranks strictly first and two candidates with the same words tie.

Replies carry ``usage`` (``input_tokens = ceil(len(body bytes) / 4)``, ``output_tokens = 8`` per
question) and the header ``x-typesafe-request-id: req-0001`` (numbered by arrival, also on errors).

Faults are scripted as a FIFO queue, one per request in arrival order (``server.script(...)``);
when the queue is empty a request is served normally. Everything is recorded in
``server.requests`` (path, headers, parsed body, arrival/finish times, status, request id), and
``server.max_concurrent`` is the most requests ever in progress at once. ``latency_s`` delays
every reply (to make concurrency observable).

Use the ``jev_server`` fixture (import its function into a test module:
``from tests.jevserver import jev_server_fixture  # noqa: F401``; the fixture is registered under
the name ``jev_server``) or ``with JevServer() as server:``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.scriptedserver import Fault, RecordedRequest, Reply, ScriptedServer

__all__ = [
    "DEFAULT_KEY",
    "OPENROUTER_PATH",
    "ROUTE_PATHS",
    "SYSTEMONE_PATH",
    "Fault",
    "JevServer",
    "JevRequest",
    "jev_server_fixture",
    "score",
]

DEFAULT_KEY = "sk-jev-test-9f8e7d6c5b4a"
SYSTEMONE_PATH = "/v1/systemone"
OPENROUTER_PATH = "/api/alpha/decisions"
ROUTE_PATHS = (SYSTEMONE_PATH, OPENROUTER_PATH)

_WORD = re.compile(r"[a-z0-9]+")
_PASSAGE = re.compile(r"<passage>(.*?)</passage>", re.DOTALL)


def score(question: str, passage: str) -> float:
    """The server's deterministic yes-probability (see the module docstring)."""
    if "GOLD" in passage:
        return 0.99
    qwords = {w for w in _WORD.findall(question.lower()) if len(w) >= 3}
    if not qwords:
        return 0.0
    pwords = set(_WORD.findall(passage.lower()))
    return round(0.9 * len(qwords & pwords) / len(qwords), 2)


class JevRequest(RecordedRequest):
    """A recorded request with the Jev body's question ids and state."""

    @property
    def question_ids(self) -> list[str]:
        if isinstance(self.body, dict) and isinstance(self.body.get("questions"), dict):
            return list(self.body["questions"])
        return []

    @property
    def state(self) -> Any:
        return self.body.get("state") if isinstance(self.body, dict) else None


def _shape_error(body: Any) -> str | None:
    """Why a request body breaks the wire format, or None."""
    if not isinstance(body, dict):
        return "body is not a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model must be a non-empty string"
    if not isinstance(body.get("state"), (str, dict)):
        return "state must be a string or an object"
    questions = body.get("questions")
    if not isinstance(questions, dict) or not questions:
        return "questions must be a non-empty object"
    for qid, q in questions.items():
        if not isinstance(q, dict) or q.get("type") != "noul":
            return f"question {qid!r} must have type 'noul'"
        if not isinstance(q.get("instructions"), str):
            return f"question {qid!r} needs instructions"
        criteria = q.get("criteria")
        if not isinstance(criteria, dict) or not all(
            isinstance(criteria.get(k), str) for k in ("true", "false")
        ):
            return f"question {qid!r} needs criteria.true and criteria.false"
    return None


class JevServer(ScriptedServer):
    """The Jev server; ``start()`` binds 127.0.0.1:0 and serves in a thread, ``stop()`` ends it.
    Fault kinds beyond ``ok``/``delay``/``status``: ``malformed`` (200 with broken JSON),
    ``missing_answer``, ``extra_answer``, ``duplicate_answer`` (an id twice in the JSON text),
    ``out_of_range`` (1.5), ``wrong_type`` (type "bool"), ``string_value`` ("0.9"),
    ``bool_value`` (true), ``nan_value`` (NaN), ``no_usage``."""

    request_id_header = "x-typesafe-request-id"
    record_type = JevRequest

    def __init__(self, api_key: str = DEFAULT_KEY, *, latency_s: float = 0.0) -> None:
        super().__init__(latency_s=latency_s)
        self.api_key = api_key

    def __enter__(self) -> JevServer:
        self.start()
        return self

    @property
    def requests(self) -> list[JevRequest]:  # type: ignore[override]
        return super().requests  # type: ignore[return-value]

    def respond(self, record: RecordedRequest, fault: Fault) -> Reply:
        auth = record.headers.get("authorization", "")
        body = record.body
        if record.path not in ROUTE_PATHS:
            return Reply.json(404, {"error": {"message": f"no route {record.path}"}})
        if auth != f"Bearer {self.api_key}":
            return Reply.json(401, {"error": {"message": f"invalid authorization header {auth!r}"}})
        if fault.kind == "status":
            err = {"error": {"message": f"scripted {fault.status} for {auth!r}"}}
            return Reply(fault.status, json.dumps(err).encode("utf-8"), fault.headers)
        problem = _shape_error(body)
        if problem is not None:
            return Reply.json(422, {"error": {"message": problem}})
        if fault.kind == "malformed":
            return Reply(200, b'{"model": "jev", "answers": {"x": {"type": "no')

        state = body["state"]
        question = state if isinstance(state, str) else str(state.get("question", ""))
        answers: dict[str, Any] = {}
        for qid, q in body["questions"].items():
            found = _PASSAGE.search(q["instructions"])
            passage = found.group(1) if found else q["instructions"]
            answers[qid] = {"type": "noul", "noul": score(question, passage)}
        first = next(iter(answers))
        if fault.kind == "missing_answer":
            del answers[first]
        elif fault.kind == "extra_answer":
            answers["not-asked"] = {"type": "noul", "noul": 0.5}
        elif fault.kind == "out_of_range":
            answers[first]["noul"] = 1.5
        elif fault.kind == "wrong_type":
            answers[first]["type"] = "bool"
        elif fault.kind == "string_value":
            answers[first]["noul"] = "0.9"
        elif fault.kind == "bool_value":
            answers[first]["noul"] = True
        reply: dict[str, Any] = {
            "model": body["model"],
            "answers": answers,
            "usage": {
                "input_tokens": -(-len(record.raw) // 4),
                "output_tokens": 8 * len(body["questions"]),
            },
        }
        if fault.kind == "no_usage":
            del reply["usage"]
        text = json.dumps(reply)
        if fault.kind == "nan_value":
            text = text.replace(json.dumps(answers[first]), '{"type": "noul", "noul": NaN}', 1)
        elif fault.kind == "duplicate_answer":
            dup = f"{json.dumps(first)}: {json.dumps(answers[first])}"
            text = text.replace(dup, f"{dup}, {dup}", 1)
        return Reply(200, text.encode("utf-8"))


@pytest.fixture(name="jev_server")
def jev_server_fixture() -> Iterator[JevServer]:
    """A started :class:`JevServer` with the default key; stopped after the test."""
    with JevServer() as server:
        yield server
