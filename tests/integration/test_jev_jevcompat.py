"""The Jev judge against a third party's reading of TypeSafe System One: jevcompat.

jevcompat (0.1.1, the ``test`` extra) specifies ``POST /v1/systemone`` in 48 numbered
requirements and ships a mock that implements them exactly and can break any one on purpose
(tests/jevcompatmock.py runs it as ``jevcompat mock`` on 127.0.0.1). Here:

* clean, the judge returns exactly the mock's probabilities (its own model, recomputed here),
  over non-ASCII text, ids that travel as ``q<n>`` and several requests; and every search
  through ``judge = "jev"`` gives the same hits, in the same order with the same scores, as
  through the project's stand-in (tests/jevserver.py) answering with the same probabilities;
* every one of the mock's faults is placed by what the judge meets (:data:`READ`,
  :data:`REFUSED`, :data:`LEAKS`, :data:`UNTOUCHED`; a test checks that the four cover all of
  them), and under each the judge either reads the reply right or raises its named error,
  :class:`~hybridsag.errors.JudgeResponseError`, and the search degrades as documented (the SAG2
  path answers in BM25 order with the reason, the search goes on with ``degraded``): never a
  wrong probability;
* ``jevcompat test`` run against the stand-in finds it conformant, every MUST and every SHOULD.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from hybridsag.errors import JudgeResponseError
from hybridsag.judges.base import Candidate
from hybridsag.judges.jev import JevJudge, build_question, build_state
from hybridsag.records.filters import Filters
from hybridsag.search import HybridSearch
from hybridsag.settings import JevSettings, Settings
from pydantic import SecretStr

from tests.jevcompatmock import (
    FAULTS,
    MOCK_KEY,
    MOCK_MODEL,
    MOCK_REQUEST_ID,
    JevcompatMock,
    jevcompat_mock_fixture,  # noqa: F401 - provides the jevcompat_mock fixture
    reference_noul,
)
from tests.jevserver import DEFAULT_KEY, JevServer

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "samples" / "corpus"
#: the demo's questions (Makefile, demo target): identifiers, Chinese, a plain question
QUESTIONS = (
    "ReActAgent",
    "E-1234",
    "我的喜好",
    "how do I install it on Linux",
    "v2.3.1 release notes",
)
QUESTION = "Which error code means the index is locked, and what does 我的喜好 say?"
LIMIT = 10

#: Candidates as a search makes them: real chunk ids (``<id>@<version>#<ordinal>``, which travel
#: as ``q0..q3``), Chinese, emoji, a combining accent beside a precomposed one, a zero-width
#: space and curly quotes: a byte changed on the way changes the mock's answer.
CANDIDATES = (
    Candidate(
        "guide/agents.md@1#2", "Agents", "ReActAgent loops: think, act, observe.", {"bm25_rank": 1}
    ),
    Candidate("zh/我的喜好.md@1#0", "我的喜好", "爱吃鱼 🐟，也喜欢散步。", {"bm25_rank": 2}),
    Candidate(
        "reference/errors.md@1#7",
        "Errors",
        "E-1234: the index is locked by another process.",
        {"bm25_rank": 3},
    ),
    Candidate(
        "notes/Ünïcödé.txt@2#0",
        "Ünïcödé \u201cquotes\u201d",
        "Zero\u200bwidth, combining e\u0301 beside \u00e9, and 👩\u200d💻.",
        {"bm25_rank": 4},
    ),
)
EVIDENCE = (Candidate("zh/常见问题.md@1#4", "常见问题", "索引被锁定时报 E-1234。"),)
PROVISIONAL = {c.chunk_id: p for c, p in zip(CANDIDATES, (0.25, 0.5, 0.75, 1.0))}

# -- every fault of jevcompat's mock, by what the judge meets --------------------------------

#: The reply breaks something the spec leaves to the server, or that a client must not rely on:
#: the judge reads it right (the clean mock's probabilities, the clean searches).
READ: Mapping[str, str] = {
    "plain-content-type": "http.content-type is a SHOULD; the judge never looks at Content-Type",
    "unprefixed-extra": "a top-level field the spec does not define is ignored, as the SDKs do",
}


@dataclass(frozen=True)
class Refusal:
    """What the judge raises under a fault: ``words`` of the JudgeResponseError; ``settings``
    are the judge's settings that meet the fault (``{}``: any); ``key`` is the mock's key."""

    words: tuple[str, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)
    key: str | None = MOCK_KEY


#: The reply breaks a MUST the judge reads, or the server refuses what the spec says it must
#: accept: the judge raises JudgeResponseError (not retried) and the search degrades.
REFUSED: Mapping[str, Refusal] = {
    "wrong-route": Refusal(("HTTP 404", "No route /v1/systemone")),
    "xssi-200": Refusal(("malformed JSON",)),
    "first-question-only": Refusal(("id(s) not answered: ['q1'",)),
    "extra-answer": Refusal(("1 id(s) not asked: ['__extra__']",)),
    "boolean-type": Refusal(("has type 'boolean', not 'noul'",)),
    "noul-range": Refusal(("outside 0..1",)),
    "no-usage": Refusal(("no 'usage' object",)),
    "float-usage": Refusal(("usage.input_tokens is ", ", not a count")),
    "nan": Refusal(("non-finite number NaN",)),
    # the SDKs send `Authorization: Bearer`; a server that reads x-api-key never sees the key
    "auth-x-api-key": Refusal(("HTTP 403", "Must supply an API key")),
    # a server without auth must accept the header the SDKs always send
    "auth-rejects-header": Refusal(("HTTP 401", "takes no key"), key=None),
    # the SDKs' default model name
    "reject-jev-latest": Refusal(("HTTP 404", "jev-latest"), {"model": "jev-latest"}),
    # met with a wrong key or an unknown model: the error's text reaches the message whatever
    # its shape (plain text, {"error": ...})
    "text-errors": Refusal(("HTTP 401", "Cannot authenticate"), {"api_key": "sk-wrong-key-0"}),
    "auth-invalid-403-text": Refusal(("HTTP 401", "bad key"), {"api_key": "sk-wrong-key-0"}),
    "error-flat": Refusal(("HTTP 400", "Unknown model: jev-0.9"), {"model": "jev-0.9"}),
}

#: The answer depends on the question's id, the number of questions or their order (a MUST and
#: two SHOULDs broken): nothing in a reply shows it, so the judge returns what the server
#: answered for each question (checked against the mock's model with the same leak).
LEAKS = ("id-leaks", "batch-leaks", "order-leaks")

#: Never met by the judge's requests (valid noul questions with string instructions and both
#: criteria, an object state, ids ``q<n>``, a Bearer key, model jev-1.13.0, no GET), or about
#: choice and score answers, which the judge never asks for: one mock with all of them on
#: answers exactly as the clean one.
UNTOUCHED: Mapping[str, str] = {
    "models-404": "the judge never calls GET /v1/models",
    "auth-plain": "only a request without a key meets it; the judge refuses to start without one",
    "reject-array-state": "the state is an object",
    "strict-ids": "chunk ids (id@version#ordinal) travel as q0, q1, ...",
    "forbid-extra": "no top-level field beyond model, state, questions",
    "string-only-text": "instructions and criteria are strings",
    "noul-two-sided": "both criteria are sent",
    "noul-needs-instructions": "instructions are always sent",
    "500-on-unknown-type": "only noul questions",
    "accept-boolean": "only noul questions",
    "validation-400": "only an invalid request meets it",
    **{
        name: "choice and score only"
        for name in (
            "nfd-keys",
            "no-null-description",
            "cap-64",
            "cap-5-levels",
            "accept-map-score",
            "choice-no-confidence",
            "choice-key-case",
            "choice-sum",
            "choice-second",
            "score-no-legend",
            "legend-1-based",
            "score-keys-1-based",
            "score-sum",
            "score-argmax",
            "confidence-over",
            "confidence-margin",
        )
    },
}


def test_every_fault_of_the_mock_is_placed() -> None:
    groups = [set(READ), set(REFUSED), set(LEAKS), set(UNTOUCHED)]
    placed = set().union(*groups)
    assert sum(len(g) for g in groups) == len(placed), "a fault is placed twice"
    assert placed == set(FAULTS), (
        f"unplaced: {sorted(set(FAULTS) - placed)}; not the mock's: {sorted(placed - set(FAULTS))}"
    )
    assert len(READ) + len(REFUSED) + len(LEAKS) >= 10  # faults the judge meets, each tested


# -- helpers ---------------------------------------------------------------------------------


def jev_settings(url: str, **overrides: Any) -> JevSettings:
    values: dict[str, Any] = {
        "base_url": url,
        "api_key": SecretStr(MOCK_KEY),
        "backoff_s": 0.0,
        "timeout_s": 10.0,
        "max_retries": 2,
    }
    values.update(overrides)
    return JevSettings(**values)


def expected(
    candidates: Sequence[Candidate] = CANDIDATES, **leak: Any
) -> dict[str, float]:
    """The mock's answer for each candidate, as the judge asks it (one request, ids q0..)."""
    state = build_state(QUESTION, EVIDENCE, PROVISIONAL)
    return {
        c.chunk_id: reference_noul(
            state, build_question(c), qid=f"q{i}", position=i, count=len(candidates), **leak
        )
        for i, c in enumerate(candidates)
    }


def judge_once(url: str, **overrides: Any) -> tuple[JevJudge, Any]:
    with httpx.Client(timeout=10.0) as client:
        judge = JevJudge(jev_settings(url, **overrides), client=client)
        return judge, judge.judge(
            QUESTION, CANDIDATES, evidence=EVIDENCE, provisional=PROVISIONAL
        )


@dataclass(frozen=True)
class Runs:
    """What one question gives: the SAG2 path's hits (chunk id, judge probability, score) and
    the fused search's results (chunk id, score, each path's facts)."""

    sag2: tuple[tuple[str, float | None, float], ...]
    results: tuple[tuple[str, float, str], ...]
    judge_calls: int


def open_search(data_dir: Path, url: str, key: str = MOCK_KEY, **jev: Any) -> HybridSearch:
    values: dict[str, Any] = {"base_url": url, "api_key": key, "backoff_s": 0.0}
    values.update(jev)
    judge = {"name": "jev", "on_failure": "degrade", "jev": values}
    return HybridSearch(Settings(data_dir=data_dir, embedding={"model": "none"}, judge=judge))


def runs(hs: HybridSearch, questions: Sequence[str] = QUESTIONS) -> dict[str, Runs]:
    out = {}
    for q in questions:
        path = hs.run_path("sag2", q, limit=LIMIT, filters=Filters())
        resp = hs.search(q, top_k=LIMIT)
        assert path.degraded is None and not resp.degraded, (q, path.degraded, resp.reasons)
        out[q] = Runs(
            tuple((h.chunk_id, h.judge_p, h.score) for h in path.hits),
            tuple(
                (r.chunk_id, r.score, json.dumps(r.paths, sort_keys=True, default=str))
                for r in resp.results
            ),
            int(path.usage["judge_calls"]),
        )
    return out


@contextmanager
def isolated(cwd: Path) -> Iterator[None]:
    """What tests/conftest.py's ``_isolated_env`` does for a test, for a module's fixture: no
    ``HYBRIDSAG_*`` variable and no config file of the checkout reach ``Settings``."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.upper().startswith("HYBRIDSAG_"):
                mp.delenv(name)
        mp.chdir(cwd)
        yield


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """samples/corpus indexed once for the module (lexical only)."""
    base = tmp_path_factory.mktemp("jevcompat-index")
    with isolated(base):
        hs = HybridSearch(Settings(data_dir=base / "data", embedding={"model": "none"}))
    try:
        report = hs.ingest_folder(CORPUS)
        assert report.errors == {} and report.chunks > 50
    finally:
        hs.close()
    return base / "data"


@pytest.fixture(scope="module")
def clean_runs(data_dir: Path) -> dict[str, Runs]:
    """Every question searched through the judge against the clean mock."""
    with JevcompatMock() as mock, isolated(data_dir.parent):
        hs = open_search(data_dir, mock.url)
        try:
            return runs(hs)
        finally:
            hs.close()


# -- clean -----------------------------------------------------------------------------------


def test_clean_mock_probabilities_are_its_model(jevcompat_mock: Any) -> None:
    mock = jevcompat_mock()
    judge, result = judge_once(mock.url)
    assert result.probabilities == expected()
    assert len(set(result.probabilities.values())) == len(CANDIDATES)  # no accidental ties
    assert result.detail["reply_models"] == [MOCK_MODEL]
    assert result.detail["request_ids"] == [MOCK_REQUEST_ID]
    assert result.usage.output_tokens == 2 * len(CANDIDATES)  # the mock's 2 per answer
    assert result.usage.input_tokens > 0
    assert judge.stats()["invalid_replies"] == 0


def test_clean_mock_over_several_requests(jevcompat_mock: Any) -> None:
    mock = jevcompat_mock()
    long = [
        Candidate(f"notes/n{i}.md@1#{i}", f"Note {i}", "锁 E-1234 " * 300 + str(i), {})
        for i in range(4)
    ]
    with httpx.Client(timeout=10.0) as client:
        judge = JevJudge(jev_settings(mock.url, token_budget=2_000), client=client)
        result = judge.judge(QUESTION, long, evidence=EVIDENCE, provisional=PROVISIONAL)
    assert result.detail["requests"] > 1
    state = build_state(QUESTION, EVIDENCE, PROVISIONAL)
    assert result.probabilities == {
        c.chunk_id: reference_noul(state, build_question(c)) for c in long
    }


def test_searches_order_as_through_the_stand_in(
    data_dir: Path, clean_runs: dict[str, Runs]
) -> None:
    def mock_model(state: Any, question: Mapping[str, Any]) -> float:
        return reference_noul(state, question)

    with JevServer(noul_scorer=mock_model) as server:
        hs = open_search(data_dir, server.url, key=DEFAULT_KEY)
        try:
            standin = runs(hs)
            bm25 = {
                q: [h.chunk_id for h in hs.run_path("bm25", q, limit=LIMIT, filters=Filters()).hits]
                for q in QUESTIONS
            }
        finally:
            hs.close()
    assert standin == clean_runs
    assert all(r.judge_calls > 0 and r.sag2 for r in clean_runs.values())
    # the judge decided the order: not BM25's for some question
    assert any([h[0] for h in clean_runs[q].sag2] != bm25[q] for q in QUESTIONS)


# -- faults ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", sorted(READ))
def test_fault_the_judge_reads(
    fault: str, jevcompat_mock: Any, data_dir: Path, clean_runs: dict[str, Runs]
) -> None:
    mock = jevcompat_mock(fault)
    judge, result = judge_once(mock.url)
    assert result.probabilities == expected()
    assert judge.stats()["invalid_replies"] == 0
    hs = open_search(data_dir, mock.url)
    try:
        # one question: a fresh search instance loads jieba's dictionary for the others (seconds)
        assert runs(hs, QUESTIONS[:1]) == {QUESTIONS[0]: clean_runs[QUESTIONS[0]]}
    finally:
        hs.close()


@pytest.mark.parametrize("fault", sorted(REFUSED))
def test_fault_the_judge_refuses_and_the_search_degrades(
    fault: str, jevcompat_mock: Any, data_dir: Path
) -> None:
    refusal = REFUSED[fault]
    settings = dict(refusal.settings)
    mock = jevcompat_mock(fault, key=refusal.key)
    with pytest.raises(JudgeResponseError) as info:
        judge_once(mock.url, **settings)
    message = str(info.value)
    assert all(w in message for w in refusal.words), message
    assert info.value.retriable is False

    question = QUESTIONS[0]
    hs = open_search(data_dir, mock.url, **settings)
    try:
        path = hs.run_path("sag2", question, limit=LIMIT, filters=Filters())
        bm25 = hs.run_path("bm25", question, limit=LIMIT, filters=Filters())
        resp = hs.search(question, top_k=LIMIT)
    finally:
        hs.close()
    # the documented degradation: the path answers in BM25 order, says why, scores nothing
    assert path.degraded is not None and refusal.words[0] in path.degraded
    assert [h.chunk_id for h in path.hits] == [h.chunk_id for h in bm25.hits]
    assert all(h.judge_p is None for h in path.hits)
    assert resp.degraded is True and refusal.words[0] in resp.reasons["sag2"]
    assert resp.results  # the search went on without the judge
    assert "sk-wrong-key-0" not in message + resp.reasons["sag2"]


@pytest.mark.parametrize("fault", LEAKS)
def test_leaky_server_is_read_as_answered(fault: str, jevcompat_mock: Any) -> None:
    mock = jevcompat_mock(fault)
    _, result = judge_once(mock.url)
    leaked = expected(faults=frozenset({fault}))
    assert result.probabilities == leaked
    assert leaked != expected()  # the leak moved an answer: the check above can tell


def test_faults_the_judge_never_meets(
    jevcompat_mock: Any, data_dir: Path, clean_runs: dict[str, Runs]
) -> None:
    mock = jevcompat_mock(*sorted(UNTOUCHED))
    judge, result = judge_once(mock.url)
    assert result.probabilities == expected()
    hs = open_search(data_dir, mock.url)
    try:
        assert runs(hs) == clean_runs
    finally:
        hs.close()


# -- the stand-in against jevcompat test ------------------------------------------------------


def test_stand_in_passes_jevcompat_test(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    with JevServer() as server:
        command = [sys.executable, "-m", "jevcompat.cli", "test", server.url]
        command += ["--key", DEFAULT_KEY, "--timeout", "30", "--json", str(report_path)]
        local = "127.0.0.1,localhost"  # a proxy in the environment must not see the stand-in
        done = subprocess.run(
            command,
            env={**os.environ, "NO_PROXY": local, "no_proxy": local},
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    report = json.loads(report_path.read_text("utf-8"))
    summary = report["summary"]
    assert summary["verdict"] == "conformant"
    status = {r["id"]: r["status"] for r in report["results"]}
    # every MUST and every SHOULD tested and passed; auth.ignored-when-off applies only to a
    # server without authentication (the stand-in always wants its key)
    assert {rid for rid, s in status.items() if s != "pass"} == {"auth.ignored-when-off"}
    assert summary["MUST"]["failed"] == summary["SHOULD"]["failed"] == 0
    assert summary["SHOULD"]["passed"] == 15 and summary["MUST"]["passed"] == 32
