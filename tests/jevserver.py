"""A local HTTP server that speaks the Jev (TypeSafe System One) wire format, for tests.

It is a real server (:class:`tests.scriptedserver.ScriptedServer`: ``ThreadingHTTPServer`` in a
thread, HTTP/1.1 keep-alive) on 127.0.0.1 with an ephemeral port. It serves both routes, ``POST
/v1/systemone`` and ``POST /api/alpha/decisions``, and ``GET /v1/models``; it checks
``Authorization: Bearer <api_key>`` (401 otherwise, with a body that echoes the presented header,
so tests can check that the client scrubs its key), validates the request body as jevcompat's
reference server does (:func:`jevcompat.mock.validate_request`: 422 with ``detail[]``), refuses
a model its route does not serve (400, :data:`SERVED_MODELS`) and answers every question:
``noul``, ``choice`` and ``score``.

Clean (no fault scripted) it conforms to jevcompat's specification of System One: ``jevcompat
test URL --key KEY`` passes every MUST and every SHOULD against it
(tests/integration/test_jev_jevcompat.py runs it; the report is in docs/operations/models.md).
Errors carry ``{"detail": {"error_type", "message"}}``; validation errors ``{"detail": [...]}``.

Scoring rule (deterministic, :func:`score`): the question is ``state["question"]`` (the whole
state when it is a string, its JSON text when it is an array or an object without a string
``question``); the candidate text is what lies between ``<passage>`` and ``</passage>`` in the
question's instructions (the whole instructions when there are no tags; their JSON text when
they are an object or an array; nothing when they are absent).
A candidate containing ``GOLD`` (upper case) scores 0.99; any other scores
``0.9 * share``, where ``share`` is the fraction of the question's distinct lowercase words
(``[a-z0-9]+``, length >= 3) that occur as words in the candidate text, rounded to 2 decimals.
So GOLD ranks strictly first and two candidates with the same words tie. ``noul_scorer``
replaces that rule for ``noul`` questions (a test that wants another server's probabilities
gives its function of ``(state, question)``). A ``choice`` or ``score`` answer spreads the
probability over its options or levels in proportion to ``0.05 + score(question, instructions
+ option)``, with ``choice`` the most probable option, ``score`` the expectation and
``confidence`` jevcompat's reference formula. No answer depends on the question's id, its place
in the request or the other questions.

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
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from jevcompat.mock import MockConfig, validate_request
from jevcompat.validate import choice_confidence, score_confidence

from tests.scriptedserver import Fault, RecordedRequest, Reply, ScriptedServer

__all__ = [
    "DEFAULT_KEY",
    "MODELS_PATH",
    "OPENROUTER_PATH",
    "ROUTE_PATHS",
    "SERVED_MODELS",
    "SYSTEMONE_PATH",
    "Fault",
    "JevServer",
    "JevRequest",
    "NoulScorer",
    "jev_server_fixture",
    "score",
    "word_noul",
]

DEFAULT_KEY = "sk-jev-test-9f8e7d6c5b4a"
SYSTEMONE_PATH = "/v1/systemone"
OPENROUTER_PATH = "/api/alpha/decisions"
ROUTE_PATHS = (SYSTEMONE_PATH, OPENROUTER_PATH)
MODELS_PATH = "/v1/models"
#: the model names each route serves (another gets 400 api_usage_error, as TypeSafe answers)
SERVED_MODELS: Mapping[str, frozenset[str]] = {
    SYSTEMONE_PATH: frozenset({"jev-latest", "jev-1.13.0"}),
    OPENROUTER_PATH: frozenset({"typesafe/jev-1.13"}),
}
MODELS = [
    {
        "name": "jev-1.13.0",
        "description": "hybridsag's test stand-in for Jev (not a real model)",
        "release_date": "2026-09-15",
    }
]

#: ``(state, noul question) -> yes-probability``: how the server answers a ``noul`` question.
NoulScorer = Callable[[Any, Mapping[str, Any]], float]

_WORD = re.compile(r"[a-z0-9]+")
_PASSAGE = re.compile(r"<passage>(.*?)</passage>", re.DOTALL)
#: the request checks of jevcompat's reference server, with no fault of its own switched on
_REFERENCE = MockConfig()
_ERROR_TYPES: Mapping[int, str] = {
    400: "api_usage_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def score(question: str, passage: str) -> float:
    """The server's deterministic yes-probability (see the module docstring)."""
    if "GOLD" in passage:
        return 0.99
    qwords = {w for w in _WORD.findall(question.lower()) if len(w) >= 3}
    if not qwords:
        return 0.0
    pwords = set(_WORD.findall(passage.lower()))
    return round(0.9 * len(qwords & pwords) / len(qwords), 2)


def _text(value: Any) -> str:
    """A text field as text: a string as it is, nothing as "", an object or array as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _question_text(state: Any) -> str:
    if isinstance(state, dict) and isinstance(state.get("question"), str):
        return state["question"]
    return _text(state)


def word_noul(state: Any, question: Mapping[str, Any]) -> float:
    """The default :data:`NoulScorer`: :func:`score` of the state's question and the passage in
    the question's instructions (see the module docstring)."""
    instructions = _text(question.get("instructions"))
    found = _PASSAGE.search(instructions)
    return score(_question_text(state), found.group(1) if found else instructions)


def _spread(scores: list[float]) -> list[float]:
    weights = [0.05 + s for s in scores]
    total = sum(weights)
    return [w / total for w in weights]


def _unit(value: float) -> float:
    """``value`` clamped to 0..1 (the reference formulas can land a rounding error outside: a
    uniform spread gives -1e-17)."""
    return min(1.0, max(0.0, value))


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> Reply:
    """An error reply in the spec's shape, ``{"detail": {"error_type", "message"}}``."""
    body = {"detail": {"error_type": _ERROR_TYPES.get(status, "api_error"), "message": message}}
    return Reply(status, json.dumps(body).encode("utf-8"), headers or {})


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


def _validation_errors(body: Any) -> list[dict[str, Any]]:
    """The request's validation errors in FastAPI's ``detail[]`` shape (empty when valid)."""
    if body is None:
        return [{"loc": ["body"], "msg": "JSON decode error", "type": "json_invalid"}]
    return validate_request(body, _REFERENCE)


class JevServer(ScriptedServer):
    """The Jev server; ``start()`` binds 127.0.0.1:0 and serves in a thread, ``stop()`` ends it.
    Fault kinds beyond ``ok``/``delay``/``status``: ``malformed`` (200 with broken JSON),
    ``missing_answer``, ``extra_answer``, ``duplicate_answer`` (an id twice in the JSON text),
    ``out_of_range`` (1.5), ``wrong_type`` (type "bool"), ``string_value`` ("0.9"),
    ``bool_value`` (true), ``nan_value`` (NaN), ``no_usage``, ``no_model`` (the envelope without
    ``model``). Each breaks one MUST of jevcompat's specification, on purpose, for one request."""

    request_id_header = "x-typesafe-request-id"
    record_type = JevRequest

    def __init__(
        self,
        api_key: str = DEFAULT_KEY,
        *,
        latency_s: float = 0.0,
        noul_scorer: NoulScorer = word_noul,
    ) -> None:
        super().__init__(latency_s=latency_s)
        self.api_key = api_key
        self.noul_scorer = noul_scorer

    def __enter__(self) -> JevServer:
        self.start()
        return self

    @property
    def requests(self) -> list[JevRequest]:  # type: ignore[override]
        return super().requests  # type: ignore[return-value]

    def _refused(self, headers: Mapping[str, str]) -> Reply | None:
        """401 unless the headers carry ``Authorization: Bearer <api_key>`` (the body echoes what
        was presented)."""
        auth = headers.get("authorization", "")
        if auth == f"Bearer {self.api_key}":
            return None
        if not auth:
            return _error(401, "Must supply an API key")
        return _error(401, f"invalid authorization header {auth!r}")

    def respond_get(self, path: str, headers: Mapping[str, str]) -> Reply:
        if path in ROUTE_PATHS:
            return _error(405, f"use POST {path}")
        if path != MODELS_PATH:
            return _error(404, f"no route {path}")
        return self._refused(headers) or Reply.json(200, {"models": MODELS})

    def respond(self, record: RecordedRequest, fault: Fault) -> Reply:
        body = record.body
        if record.path not in ROUTE_PATHS:
            return _error(404, f"no route {record.path}")
        refused = self._refused(record.headers)
        if refused is not None:
            return refused
        if fault.kind == "status":
            auth = record.headers.get("authorization", "")
            return _error(fault.status, f"scripted {fault.status} for {auth!r}", fault.headers)
        problems = _validation_errors(body)
        if problems:
            return Reply.json(422, {"detail": problems})
        if body["model"] not in SERVED_MODELS[record.path]:
            return _error(400, f"Unknown model: {body['model']}")
        if fault.kind == "malformed":
            return Reply(200, b'{"model": "jev", "answers": {"x": {"type": "no')

        state = body["state"]
        answers = {qid: self._answer(state, q) for qid, q in body["questions"].items()}
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
        elif fault.kind == "no_model":
            del reply["model"]
        text = json.dumps(reply)
        if fault.kind == "nan_value":
            text = text.replace(json.dumps(answers[first]), '{"type": "noul", "noul": NaN}', 1)
        elif fault.kind == "duplicate_answer":
            dup = f"{json.dumps(first)}: {json.dumps(answers[first])}"
            text = text.replace(dup, f"{dup}, {dup}", 1)
        return Reply(200, text.encode("utf-8"))

    def _answer(self, state: Any, question: Mapping[str, Any]) -> dict[str, Any]:
        """One answer in the spec's shape for its type (see the module docstring)."""
        kind = question["type"]
        if kind == "noul":
            return {"type": "noul", "noul": self.noul_scorer(state, question)}
        asked = _question_text(state)
        instructions = _text(question.get("instructions"))
        criteria = question["criteria"]
        if kind == "choice":
            names = list(criteria)
            probs = _spread(
                [score(asked, f"{instructions} {n} {_text(criteria[n])}") for n in names]
            )
            top = max(range(len(names)), key=probs.__getitem__)
            return {
                "type": "choice",
                "choice": names[top],
                "probabilities": dict(zip(names, probs)),
                "confidence": _unit(choice_confidence(probs)),
            }
        probs = _spread([score(asked, f"{instructions} {_text(level)}") for level in criteria])
        return {
            "type": "score",
            "score": sum(i * p for i, p in enumerate(probs)),
            "legend": {str(i): level for i, level in enumerate(criteria)},
            "probabilities": {str(i): p for i, p in enumerate(probs)},
            "confidence": _unit(score_confidence(probs)),
        }


@pytest.fixture(name="jev_server")
def jev_server_fixture() -> Iterator[JevServer]:
    """A started :class:`JevServer` with the default key; stopped after the test."""
    with JevServer() as server:
        yield server
